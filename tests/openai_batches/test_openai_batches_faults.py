"""The OpenAI Batches façade under a fault (SPEC §14 over §10.6): ``kill -9`` of one of two replicas
while it runs a §14 batch's items leaves every line of the input in the output or the error file
exactly once (the killed replica's running items as ``worker_lost``), on SQLite and Postgres. The
fleet and its checks are ``batches_api/test_faults.py``'s."""

from __future__ import annotations

import signal
from collections.abc import Callable

from tests.batches_api.test_faults import Fleet, apply_catalog, fleet_for, in_flight, items, wait_for  # noqa: F401
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import uniq
from tests.openai_batches.helpers import create, file_lines, line, sdk, wait_ended

CHAT = "/v1/chat/completions"


def test_a_killed_replica_leaves_every_line_in_a_file_once(
    database_url: str,
    fleet_for: Callable[..., Fleet],  # noqa: F811
    fake: FakeUpstream,
) -> None:
    n, latency_ms = 16, 600
    fleet = fleet_for(database_url)
    doomed = fleet.start("doomed")
    survivor = fleet.launch("survivor")
    catalog = apply_catalog(fleet.gateway(doomed, ""))
    fleet.ready()
    fleet.learn(catalog.key)
    gw = fleet.gateway(survivor, catalog.key)
    tag = uniq("oakill")
    lines = [line(f"k{i}", CHAT, body) for i, body in enumerate(items(tag, n, catalog.model, latency_ms))]
    client = sdk(gw, catalog.key)
    created = create(client, lines)

    wait_for("the doomed replica to run items", lambda: in_flight(fake, tag, doomed), 30, fleet.logs)
    assert doomed.process.stop(signal.SIGKILL) == -signal.SIGKILL
    done = wait_ended(client, created.id, timeout=90)
    assert done.status == "completed", done
    outputs = file_lines(client, done.output_file_id) if done.output_file_id else []
    errors = file_lines(client, done.error_file_id) if done.error_file_id else []
    assert sorted(item["custom_id"] for item in outputs + errors) == sorted(f"k{i}" for i in range(n))
    assert errors, "the killed replica's running items are in the error file"
    assert {item["error"]["code"] for item in errors} == {"worker_lost"}
    assert all(item["response"]["status_code"] == 200 for item in outputs)
    assert survivor.alive
