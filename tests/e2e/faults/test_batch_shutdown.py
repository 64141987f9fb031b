"""Batch fault tests, failing keys and shutdowns (SPEC §10.6, §10.7, §13 "no item is lost or run twice
concurrently"), against real ``relay serve`` processes, real databases and the real fake upstream: a
host key that starts failing mid-batch; SIGTERM with a grace long enough to drain, and with one too
short (items put back).

Every test ends with :func:`settle` and checks from the fake's request log that no item was sent by two
replicas at once (see ``tests.e2e.faults.fleet``). A shutdown past its grace abandons attempts:
there the test asserts that a put-back item is sent again only by a replica started after the first
exited.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

from tests.e2e.faults.fleet import (
    Fleet,
    Replica,
    apply_catalog,
    assert_never_concurrent,
    in_flight,
    items,
    sends,
    settle,
    states,
    view,
)
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import metric_value, uniq
from tests.fixtures.polling import wait_for
from tests.integration.batch_api.helpers import batch_events, submit

# ---------------------------------------------------------------------------------------------- 3. key fails


def test_key_failing_mid_batch_fails_over_and_every_item_completes(
    tmp_path: Path,
    fleet_for: Callable[..., Fleet],
    fake: FakeUpstream,
) -> None:
    """SPEC §6 / §13: a host with two keys (prioritized); partway through the batch the first key starts
    answering 503. Its breaker opens, items fail over to the second key, and every item still completes
    with exactly one event; attempts of one item are sequential."""
    n, latency_ms = 24, 400
    fleet = fleet_for(f"sqlite:///{tmp_path / 'relay.db'}")
    replica = fleet.start("solo")
    primary, backup = uniq("ka"), uniq("kb")
    gw = fleet.gateway(replica, "")
    catalog = apply_catalog(gw, [{"value": primary}, {"value": backup}])
    gw.key = catalog.key
    primary_id, backup_id = catalog.host_key_ids
    tag = uniq("key")
    batch_id = submit(gw, "openai", items(tag, n, catalog.model, latency_ms), key=catalog.key)

    def some_done() -> bool:
        v = view(gw, batch_id)
        return v is not None and v["counts"].get("completed", 0) >= 6

    wait_for("the first items to complete", some_done, 30, fleet.logs)
    failing_since = time.time()
    fake.configure(key_rules=[{"pattern": primary, "status": 503}])

    done = settle(gw, batch_id, tag, n, fleet)
    assert done.having("completed") == set(range(n)), f"{done.errors}\n{fleet.logs()}"
    sent = sends(fake, tag)
    assert_never_concurrent(sent, latency_ms / 1000)
    for idx in range(n):
        answered = [s for s in sent[idx] if s.status == 200]
        assert len(answered) == 1, (idx, sent[idx])
    failed = [s for attempts in sent.values() for s in attempts if s.status == 503]
    assert failed and {s.key for s in failed} == {primary}
    assert all(s.ts >= failing_since for s in failed)  # the rule is read when a request arrives
    used = {e["host_key_id"] for e in done.events.values()}
    assert used == {primary_id, backup_id}, used  # before the failure, then after it
    failed_over = [e for e in done.events.values() if e["attempts"] >= 2]
    assert failed_over and all(e["host_key_id"] == backup_id for e in failed_over), failed_over
    metrics = gw.metrics()
    assert metric_value(metrics, "relay_breaker_trips_total", host_key=primary_id) >= 1
    assert metric_value(metrics, "relay_breaker_open", host_key=primary_id) == 1
    assert metric_value(metrics, "relay_breaker_trips_total", host_key=backup_id) == 0


# ---------------------------------------------------------------------------------------------- 4. SIGTERM


def _wave_in_flight(fake: FakeUpstream, tag: str, replica: Replica, wave: set[int]) -> Callable[[], bool]:
    return lambda: in_flight(fake, tag, replica) == wave


def claim_times(database: Path, batch_id: str) -> tuple[datetime, dict[int, datetime | None]]:
    """When a replica last reserved items of the batch (``batches.last_claimed_at``, stamped by every
    claim that takes items) and when each item was started (``batch_items.claimed_at``, set again when
    a reserved item starts running; cleared when one is put back). On SQLite both are the claiming
    process's clock, the clock this test reads."""

    def utc(stamp: str | None) -> datetime | None:
        return None if stamp is None else datetime.fromisoformat(stamp).replace(tzinfo=UTC)

    with closing(sqlite3.connect(database)) as db:
        (last,) = db.execute("SELECT last_claimed_at FROM batches WHERE id = ?", (batch_id,)).fetchone()
        rows = db.execute("SELECT idx, claimed_at FROM batch_items WHERE batch_id = ?", (batch_id,))
        started = {idx: utc(stamp) for idx, stamp in rows}
    last_claim = utc(last)
    assert last_claim is not None
    return last_claim, started


def test_sigterm_drains_running_items_and_claims_no_more(
    tmp_path: Path,
    fleet_for: Callable[..., Fleet],
    fake: FakeUpstream,
) -> None:
    """SPEC §10.6, a grace long enough: SIGTERM while a replica runs 4 items of 8. Those 4 finish as
    ``completed`` before it exits; it claims and starts nothing after the signal (the batch's last claim
    and every completed item's start are older than the signal, however slow the machine; an item it
    had reserved but not started is put back), so the rest is still ``available`` (never sent upstream)
    when it has gone. A cancel then settles those (one event each)."""
    n, latency_ms = 8, 3000
    database = tmp_path / "relay.db"
    fleet = fleet_for(f"sqlite:///{database}")
    front = fleet.start("front", RELAY_BATCH_WORKERS="0")
    worker = fleet.launch("worker", RELAY_SHUTDOWN_GRACE_S="30")
    catalog = apply_catalog(fleet.gateway(front, ""))
    fleet.ready()
    fleet.learn(catalog.key)
    gw = fleet.gateway(front, catalog.key)
    tag = uniq("drain")
    batch_id = submit(gw, "openai", items(tag, n, catalog.model, latency_ms), key=catalog.key)
    wave = {0, 1, 2, 3}

    wait_for("the first 4 items to be sent", _wave_in_flight(fake, tag, worker, wave), 30, fleet.logs)
    signalled_at = datetime.now(UTC)
    assert worker.process.proc is not None
    worker.process.proc.send_signal(signal.SIGTERM)
    assert worker.process.proc.wait(timeout=60) == 0, worker.process.logs()

    last_claim, started = claim_times(database, batch_id)
    assert last_claim < signalled_at, "the replica claimed items after SIGTERM"
    after = view(gw, batch_id)
    assert after is not None
    left = states(after)
    assert {left[idx] for idx in wave} == {"completed"}, after["items"]  # drained, not put back
    assert set(left.values()) <= {"available", "completed"}, after["items"]  # nothing left running
    # Items completed beyond the wave started before the signal (a slot came free before it, on a slow
    # machine). Whatever was not started by then must be left ``available`` for the checks to mean
    # anything: those are the items a replica still claiming or starting after the signal would run.
    unclaimed = {idx for idx, state in left.items() if state == "available"}
    ran = {idx: started[idx] for idx in set(left) - unclaimed}
    late = {idx: at for idx, at in ran.items() if at is None or at >= signalled_at}
    assert not late, f"items started after SIGTERM: {late}"
    assert unclaimed, f"every item was started before SIGTERM, none left to test: {after['items']}"
    sent = sends(fake, tag)
    assert unclaimed.isdisjoint(sent), sent
    assert all(len(tries) == 1 and tries[0].key == worker.upstream_key for tries in sent.values()), sent

    response = gw.post(f"/v1/batches/{batch_id}/cancel", key=catalog.key)
    assert response.status_code == 200, response.text
    done = settle(gw, batch_id, tag, n, fleet)
    assert done.having("completed") == set(range(n)) - unclaimed
    assert done.having("cancelled") == unclaimed
    assert_never_concurrent(sent, latency_ms / 1000)


def test_sigterm_past_grace_puts_items_back_for_another_replica(
    postgres_url: str,
    fleet_for: Callable[..., Fleet],
    fake: FakeUpstream,
) -> None:
    """SPEC §10.6, a grace too short (0.5 s) for 2 s items: at SIGTERM the replica stops its running
    items and puts them back to ``available`` with no usage event; a replica started afterwards runs
    them (and the rest) to ``completed``: exactly one event per item, no item run twice at once."""
    n, latency_ms = 8, 2000
    fleet = fleet_for(postgres_url)
    front = fleet.start("front", RELAY_BATCH_WORKERS="0")
    quitter = fleet.launch("quitter", RELAY_SHUTDOWN_GRACE_S="0.5")
    catalog = apply_catalog(fleet.gateway(front, ""))
    fleet.ready()
    fleet.learn(catalog.key)
    gw = fleet.gateway(front, catalog.key)
    tag = uniq("putback")
    batch_id = submit(gw, "openai", items(tag, n, catalog.model, latency_ms), key=catalog.key)
    wave = {0, 1, 2, 3}

    wait_for("the first 4 items to be sent", _wave_in_flight(fake, tag, quitter, wave), 30, fleet.logs)
    assert quitter.process.proc is not None
    quitter.process.proc.send_signal(signal.SIGTERM)
    assert quitter.process.proc.wait(timeout=60) == 0, quitter.process.logs()
    exited_at = time.time()

    after = view(gw, batch_id)
    assert after is not None
    left = states(after)
    assert set(left.values()) <= {"available", "completed"}, after["items"]  # nothing left running
    put_back = {idx for idx in wave if left[idx] == "available"}
    assert put_back, f"every running item finished within the 0.5 s grace: {after['items']}"
    assert {e["batch_idx"] for e in batch_events(gw, batch_id)} == wave - put_back  # none for put-back items
    assert {left[idx] for idx in range(4, n)} == {"available"}

    rescuer = fleet.start("rescuer", RELAY_BATCH_WORKERS="8")
    done = settle(gw, batch_id, tag, n, fleet)
    assert done.having("completed") == set(range(n)), done.errors
    sent = sends(fake, tag)
    for idx in range(n):
        by_rescuer = [s for s in sent[idx] if s.key == rescuer.upstream_key]
        by_quitter = [s for s in sent[idx] if s.key == quitter.upstream_key]
        assert by_quitter == [] or (len(by_quitter) == 1 and idx in wave), (idx, sent[idx])
        if idx in put_back or idx >= 4:
            # Run again from the start, only once the first replica had gone.
            assert len(by_rescuer) == 1 and by_rescuer[0].status == 200, (idx, sent[idx])
            assert by_rescuer[0].ts > exited_at, (idx, sent[idx])
        else:
            assert by_rescuer == [], (idx, sent[idx])
