"""Provider batch offload across replicas (SPEC §22): two ``relay serve`` processes on one Postgres and
one Redis; the replica that submitted an offloaded batch is killed with SIGKILL while the batch is
being polled (the provider in an outage, so it cannot end meanwhile), and the other replica finishes
it from the database's state: every item mapped once, one usage event each."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import GATEWAY_ENV, Gateway, Reaper, replicas_on_redis
from tests.integration.batch_api.helpers import item_events
from tests.integration.offload.helpers import OFFLOAD_ENV, offload_scenario, wait_offload
from tests.integration.openai_batches.helpers import create, line
from tests.integration.openai_batches.helpers import sdk as openai_sdk
from tests.integration.openai_batches.helpers import wait_ended as openai_ended

#: The replicas have directories of their own: the bodies go to the database, which both share.
SHARED_BODIES = {"RELAY_BATCH_PAYLOAD_STORE": "database"}


@pytest.fixture
def replicas(
    tmp_path_factory: pytest.TempPathFactory, fake_upstream: FakeUpstream, live_reaper: Reaper
) -> Iterator[list[Gateway]]:
    with replicas_on_redis(
        "ab", tmp_path_factory, fake_upstream, live_reaper, {**GATEWAY_ENV, **OFFLOAD_ENV, **SHARED_BODIES}
    ) as gateways:
        yield gateways


def test_a_replica_killed_while_polling_leaves_the_batch_to_another(
    replicas: list[Gateway], fake: FakeUpstream
) -> None:
    first, second = replicas
    sc = offload_scenario(first)
    second.wait_until_known(sc.key)
    fake.configure(batch_poll_status=503)  # no replica can see it end: both keep polling
    body = {"model": sc.chat, "messages": [{"role": "user", "content": "item"}]}
    batch = create(
        openai_sdk(first, sc.key), [line(f"req-{i}", "/v1/chat/completions", body) for i in range(4)]
    )
    wait_offload(first, batch.id)
    time.sleep(1.0)  # rounds of both replicas meet the outage
    assert first.relay.stop(signal.SIGKILL) == -signal.SIGKILL

    fake.configure(batch_poll_status=None)
    client = openai_sdk(second, sc.key)
    ended = openai_ended(client, batch.id, timeout=60)
    assert ended.status == "completed" and ended.request_counts is not None
    assert ended.request_counts.completed == 4
    events = item_events(second, batch.id, 4)
    assert {e["offloaded"] for e in events.values()} == {True}
    time.sleep(1.0)
    assert len(item_events(second, batch.id, 4)) == 4  # nothing mapped twice
