"""Batch fault tests, crashes (SPEC §10.6, §10.7, §13 "no item is lost or run twice concurrently"),
against real ``relay serve`` processes, real databases and the real fake upstream: a replica killed
with SIGKILL while it runs items (Postgres and SQLite), and Postgres restarted mid-batch (a private
cluster, never the machine's shared server).

Every test ends with :func:`settle` (every item final, exactly one usage event per item, states, results
and events in agreement) and checks from the fake's request log that no item was sent by two replicas at
once (see ``tests.e2e.faults.fleet``). Abandoned attempts only happen on SIGKILL: there the test
asserts the stronger fact that a killed replica's item is never sent again.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from tests.e2e.faults.fleet import (
    OVERLAP_TOLERANCE,
    Fleet,
    apply_catalog,
    assert_never_concurrent,
    in_flight,
    items,
    sends,
    settle,
    view,
)
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import uniq
from tests.fixtures.polling import wait_for
from tests.fixtures.private_postgres import PrivateCluster
from tests.integration.batch_api.helpers import submit

# ---------------------------------------------------------------------------------------------- 1. SIGKILL


def test_killed_replica_items_are_worker_lost_and_the_rest_complete(
    database_url: str,
    fleet_for: Callable[..., Fleet],
    fake: FakeUpstream,
) -> None:
    """SPEC §10.6 / §13: kill -9 one of two replicas while it runs items. Its running items end
    ``discarded`` with ``worker lost: replica <its id> …`` (found through its stale heartbeat) and are
    never sent again; every other item completes, run once, by the survivor; one event per item. On
    Postgres (SKIP LOCKED) and on SQLite (two processes on one file, BEGIN IMMEDIATE)."""
    n, latency_ms = 16, 600
    fleet = fleet_for(database_url)
    doomed = fleet.start("doomed")  # migrates the empty database
    survivor = fleet.launch("survivor")  # boots while the catalog is applied
    catalog = apply_catalog(fleet.gateway(doomed, ""))
    fleet.ready()
    fleet.learn(catalog.key)
    gw = fleet.gateway(survivor, catalog.key)
    tag = uniq("kill")
    batch_id = submit(gw, "openai", items(tag, n, catalog.model, latency_ms), key=catalog.key)

    wait_for("the doomed replica to run items", lambda: in_flight(fake, tag, doomed), 30, fleet.logs)
    assert doomed.process.stop(signal.SIGKILL) == -signal.SIGKILL
    killed_at = time.time()  # the process is gone by now
    latency_s = latency_ms / 1000
    # Requests whose answer the fake could not have sent before the process died: the doomed replica
    # cannot have finalized those items.
    unanswered = {
        idx
        for idx, attempts in sends(fake, tag).items()
        for s in attempts
        if s.key == doomed.upstream_key
        and (s.status is None or s.ts + OVERLAP_TOLERANCE * latency_s > killed_at)
    }

    done = settle(gw, batch_id, tag, n, fleet)
    sent = sends(fake, tag)
    discarded = done.having("discarded")
    assert done.having("cancelled") == set()
    assert unanswered and unanswered <= discarded, (unanswered, done.states, fleet.logs())
    for idx in discarded:
        error = str(done.errors[idx])
        assert error.startswith(f"worker lost: replica {doomed.instance} "), error
        assert "RELAY_BATCH_RESCUE_AFTER_S" not in error, error  # found by its heartbeat, not the backstop
        assert done.events[idx]["error_kind"] == "worker_lost", done.events[idx]
        # Claimed by the doomed replica (sent by it at most once), never run by the survivor.
        assert [s.key for s in sent.get(idx, [])] in ([], [doomed.upstream_key]), (idx, sent.get(idx))
    for idx in done.having("completed"):
        attempts = sent.get(idx, [])
        assert len(attempts) == 1 and attempts[0].status == 200, (idx, attempts)
        if attempts[0].key == doomed.upstream_key:  # completed before the kill
            assert attempts[0].ts < killed_at, (idx, attempts)
        else:
            assert attempts[0].key == survivor.upstream_key, (idx, attempts)
    after_kill = [s for attempts in sent.values() for s in attempts if s.ts > killed_at]
    assert after_kill and {s.key for s in after_kill} == {survivor.upstream_key}
    assert survivor.alive, survivor.process.logs()
    # On-call sees the take-over: a line per pass that took items of this batch from the dead replica.
    taken = [r for r in survivor.process.log_records() if r.get("event") == "batch_taken_over"]
    assert taken and {(r["level"], r["batch_id"], r["lost_replica"]) for r in taken} == {
        ("warning", batch_id, doomed.instance)
    }
    assert sum(r["items"] for r in taken) == len(discarded)


# ---------------------------------------------------------------------------------------------- 2. Postgres


@pytest.mark.parametrize(
    ("mode", "down_s"),
    [("fast", 0.0), ("immediate", 2.0)],
    ids=["restart-fast", "crash-and-2s-outage"],
)
def test_postgres_restart_mid_batch_loses_nothing(
    private_postgres: PrivateCluster,
    fleet_for: Callable[..., Fleet],
    fake: FakeUpstream,
    mode: str,
    down_s: float,
) -> None:
    """SPEC §13: Postgres restarts while two replicas run a batch (``pg_ctl stop -m fast`` then start,
    or ``-m immediate`` — a crash with WAL recovery — and 2 s down, longer than 3 heartbeats). Relay
    recovers by itself: every item completes (no replica died, so none is ``worker lost``), exactly one
    event each, no item run twice at once, both replicas still serving."""
    n, latency_ms = 24, 800
    fleet = fleet_for(private_postgres.createdb())
    first = fleet.start("a")
    second = fleet.launch("b")
    catalog = apply_catalog(fleet.gateway(first, ""))
    fleet.ready()
    fleet.learn(catalog.key)
    gw = fleet.gateway(first, catalog.key)
    tag = uniq("pg")
    batch_id = submit(gw, "openai", items(tag, n, catalog.model, latency_ms), key=catalog.key)

    def mid_batch() -> bool:
        v = view(gw, batch_id)
        return v is not None and v["counts"].get("completed", 0) >= 4 and bool(in_flight(fake, tag, first))

    wait_for("the batch to be under way", mid_batch, 30, fleet.logs)
    # Stop the database just before the running items are answered, so their finalizes meet the outage.
    waiting = [s.ts for attempts in sends(fake, tag).values() for s in attempts if s.status is None]
    if waiting:
        time.sleep(max(0.0, min(waiting) + latency_ms / 1000 - 0.2 - time.time()))
    private_postgres.stop(mode)
    time.sleep(down_s)
    private_postgres.start()

    done = settle(gw, batch_id, tag, n, fleet, timeout=90)
    lost = {idx: done.errors[idx] for idx in done.states if done.states[idx] != "completed"}
    assert not lost, f"items not completed after a Postgres restart: {lost}\n{fleet.logs()}"
    sent = sends(fake, tag)
    assert_never_concurrent(sent, latency_ms / 1000)
    for idx in range(n):
        assert any(s.status == 200 for s in sent.get(idx, [])), (idx, sent.get(idx))
        assert {s.key for s in sent[idx]} <= {first.upstream_key, second.upstream_key}
    assert first.alive and second.alive, fleet.logs()
    assert view(fleet.gateway(second, catalog.key), batch_id) is not None  # both serve after recovery
