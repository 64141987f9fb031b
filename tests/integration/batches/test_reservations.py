"""Claim-ahead reservations (SPEC §10.2, §10.5) on real SQLite and Postgres: a reserved item reads
``available``, is cancelled by a cancel like any waiting item, and can no longer start after it; an
item runs only once ``queue_ops.start`` made it ``running``."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import (
    cancel_events,
    events,
    items,
    put_back_events,
    set_back,
    submit,
)


def keys(claimed: list[queue_ops.ClaimedItem]) -> list[tuple[str, int]]:
    return [(c.batch_id, c.idx) for c in claimed]


async def test_a_claim_reserves_items_that_read_available_until_started(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 4)
    claimed = await queue_ops.claim(engine, "r1", 3)
    assert keys(claimed) == [(batch_id, 0), (batch_id, 1), (batch_id, 2)]
    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"]) for r in rows] == [("available", "r1")] * 3 + [("available", None)]
    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None and view.counts == {"available": 4}
    # Another replica's claim takes only what nobody reserved.
    assert keys(await queue_ops.claim(engine, "r2", 5)) == [(batch_id, 3)]
    assert await queue_ops.claim(engine, "r3", 5) == []
    # Only the reserving replica can start them; the start says which started.
    assert await queue_ops.start(engine, "r2", keys(claimed)) == set()
    assert await queue_ops.start(engine, "r1", keys(claimed[:2])) == {(batch_id, 0), (batch_id, 1)}
    assert await queue_ops.start(engine, "r1", keys(claimed[:2])) == set()  # already running
    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None and view.counts == {"available": 2, "running": 2}
    assert await queue_ops.held_by(engine, "r1") == keys(claimed)  # running and reserved
    assert await queue_ops.open_counts(engine) == {"available": 2, "running": 2}


async def test_a_cancel_cancels_reserved_items_and_they_never_start(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)
    claimed = await queue_ops.claim(engine, "r1", 3)
    assert await queue_ops.start(engine, "r1", keys(claimed[:1])) == {(batch_id, 0)}
    assert await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id)) == [1, 2]
    assert await queue_ops.start(engine, "r1", keys(claimed)) == set()
    rows = await items(engine, batch_id)
    assert [(r["state"], r["error"], r["claimed_by"]) for r in rows] == [("running", None, "r1")] + [
        ("cancelled", "cancelled", None)
    ] * 2
    assert await events(engine, batch_id) == [(1, "cancelled"), (2, "cancelled")]


async def test_a_start_racing_a_cancel_either_runs_before_it_or_never(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    """Concurrent starts and cancels on separate connections: every item ends either running (its
    start committed first, so the cancel left it) or cancelled with one event, never both."""
    for _ in range(5):
        batch_id = await submit(engine, 8)
        claimed = await queue_ops.claim(replica_engines[0], "r1", 8)
        started, cancelled = await asyncio.gather(
            queue_ops.start(replica_engines[0], "r1", keys(claimed)),
            queue_ops.cancel(replica_engines[1], batch_id, events_for=cancel_events(batch_id)),
        )
        rows = {r["idx"]: r["state"] for r in await items(engine, batch_id)}
        assert {idx for _, idx in started} == {i for i, s in rows.items() if s == "running"}
        assert set(cancelled) == {i for i, s in rows.items() if s == "cancelled"}
        assert len(started) + len(cancelled) == 8
        assert [idx for idx, _ in await events(engine, batch_id)] == sorted(cancelled)


async def test_reservations_of_a_lost_replica_are_released(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 4)
    await queue_ops.heartbeat(engine, "dead")
    await queue_ops.heartbeat(engine, "alive")
    await queue_ops.claim(engine, "dead", 2)
    await set_back(engine, t.batch_workers, "heartbeat_at", 60)
    await queue_ops.heartbeat(engine, "alive")
    await queue_ops.claim(engine, "alive", 1)
    await queue_ops.claim(engine, "gone", 1)  # no worker row at all (its claim upserted one: remove it)
    await queue_ops.forget_worker(engine, "gone")
    assert await queue_ops.release_lost_reservations(engine, stale_after_s=30) == 3
    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"]) for r in rows] == [("available", None)] * 2 + [
        ("available", "alive"),
        ("available", None),
    ]
    assert await queue_ops.start(engine, "dead", [(batch_id, 0)]) == set()  # it lost them
    assert keys(await queue_ops.claim(engine, "alive", 5)) == [(batch_id, 0), (batch_id, 1), (batch_id, 3)]


async def test_put_back_releases_reservations(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)
    claimed = await queue_ops.claim(engine, "r1", 3)
    await queue_ops.start(engine, "r1", keys(claimed[:1]))
    assert await queue_ops.put_back(engine, "r1", keys(claimed), events_for=put_back_events) == 1
    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"], r["claimed_at"]) for r in rows] == [("available", None, None)] * 3
