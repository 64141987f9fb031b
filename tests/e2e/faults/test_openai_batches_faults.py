"""The OpenAI Batches façade under a fault (SPEC §14 over §10.6): ``kill -9`` of one of two replicas
while it runs a §14 batch's items leaves every line of the input in the output or the error file
exactly once (the killed replica's running items as ``worker_lost``), on SQLite and Postgres; a
Postgres restart mid-batch loses no line. The
fleet and its checks are ``batches_api/faults_fleet.py``'s."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import openai

from tests.e2e.faults.fleet import Fleet, apply_catalog, in_flight, items
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import uniq
from tests.fixtures.polling import wait_for
from tests.fixtures.private_postgres import PrivateCluster
from tests.integration.openai_batches.helpers import ENDED, create, file_lines, line, sdk, wait_ended

CHAT = "/v1/chat/completions"


def test_a_killed_replica_leaves_every_line_in_a_file_once(
    database_url: str,
    fleet_for: Callable[..., Fleet],
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


def test_a_postgres_restart_mid_batch_loses_no_line(
    private_postgres: PrivateCluster,
    fleet_for: Callable[..., Fleet],
    fake: FakeUpstream,
) -> None:
    """Postgres restarts (``pg_ctl stop -m fast``, then start) while two replicas run a §14 batch: every
    line completes and is in the output file once; no error file."""
    n, latency_ms = 24, 800
    fleet = fleet_for(private_postgres.createdb())
    first = fleet.start("a")
    fleet.launch("b")
    catalog = apply_catalog(fleet.gateway(first, ""))
    fleet.ready()
    fleet.learn(catalog.key)
    gw = fleet.gateway(first, catalog.key)
    tag = uniq("oapg")
    lines = [line(f"p{i}", CHAT, body) for i, body in enumerate(items(tag, n, catalog.model, latency_ms))]
    client = sdk(gw, catalog.key)
    created = create(client, lines)

    def mid_batch() -> bool:
        counts = client.batches.retrieve(created.id).request_counts
        return counts is not None and counts.completed >= 4 and bool(in_flight(fake, tag, first))

    wait_for("the batch to be under way", mid_batch, 30, fleet.logs)
    private_postgres.stop("fast")
    private_postgres.start()

    deadline = time.monotonic() + 90
    while True:
        try:
            done = client.batches.retrieve(created.id)
            if done.status in ENDED:
                break
        except (openai.APIStatusError, openai.APIConnectionError):
            pass  # a 503 while the database is away
        assert time.monotonic() < deadline, fleet.logs()
        time.sleep(0.2)
    assert done.status == "completed" and done.error_file_id is None, (done, fleet.logs())
    outputs = file_lines(client, done.output_file_id)
    assert sorted(item["custom_id"] for item in outputs) == sorted(f"p{i}" for i in range(n))
