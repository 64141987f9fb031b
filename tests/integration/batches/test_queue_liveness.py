"""The batch store's replica liveness on real SQLite and Postgres: heartbeats, rescue of a dead
replica's items (several rescuers at once), put back, and what a replica holds.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import (
    cancel_events,
    claim_run,
    complete,
    completed_at,
    events,
    items,
    put_back_events,
    rescue_events,
    set_back,
    submit,
)

# ---------------------------------------------------------------------------------------------- liveness


async def test_heartbeat_and_forget_worker(engine: AsyncEngine) -> None:
    await queue_ops.heartbeat(engine, "r1")
    await set_back(engine, t.batch_workers, "heartbeat_at", 60)
    await queue_ops.heartbeat(engine, "r1")
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(t.batch_workers))).all()
    assert row.instance_id == "r1" and row.heartbeat_at >= row.started_at

    await queue_ops.forget_worker(engine, "r1")
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(t.batch_workers))).scalar_one() == 0


async def test_rescue_discards_the_items_of_a_replica_with_a_stale_heartbeat(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 4)
    await claim_run(engine, "dead", 2)
    await set_back(engine, t.batch_workers, "heartbeat_at", 120)
    await claim_run(engine, "alive", 2)

    rescued = await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)

    assert [(r.idx, r.claimed_by, r.batch.policy_name) for r in rescued] == [
        (0, "dead", "default"),
        (1, "dead", "default"),
    ]
    error = "worker lost: replica dead stopped before finishing the item"
    rows = await items(engine, batch_id)
    assert [(r["state"], r["error"]) for r in rows] == [("discarded", error)] * 2 + [("running", None)] * 2
    assert await events(engine, batch_id) == [(0, error), (1, error)]
    assert await completed_at(engine, batch_id) is None
    assert (
        await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events) == []
    )


async def test_a_replica_never_rescues_its_own_items_as_lost(engine: AsyncEngine) -> None:
    """SPEC §10.6: ``worker lost`` is for items of a replica that died. The rescuer's own row can look
    stale (a heartbeat, then a long wait for the write lock or a stalled loop): its items stay running,
    another stale replica's are rescued, and the latest bound still applies to its own."""
    batch_id = await submit(engine, 5)
    await claim_run(engine, "me", 2)
    await claim_run(engine, "dead", 2)
    await set_back(engine, t.batch_workers, "heartbeat_at", 120)  # both rows look stale
    await queue_ops.claim(engine, "me", 1)  # a reservation (its claim heartbeats: set back once more)
    await set_back(engine, t.batch_workers, "heartbeat_at", 120)

    rescued = await queue_ops.rescue(
        engine, by="me", stale_after_s=30, rescue_after_s=900, events_for=rescue_events
    )
    assert [(r.idx, r.claimed_by) for r in rescued] == [(2, "dead"), (3, "dead")]
    assert await queue_ops.release_lost_reservations(engine, by="me", stale_after_s=30) == 0
    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"]) for r in rows] == [
        ("running", "me"),
        ("running", "me"),
        ("discarded", "dead"),
        ("discarded", "dead"),
        ("available", "me"),
    ]

    await set_back(engine, t.batch_items, "claimed_at", 1000)  # past RELAY_BATCH_RESCUE_AFTER_S
    late = await queue_ops.rescue(
        engine, by="me", stale_after_s=30, rescue_after_s=900, events_for=rescue_events
    )
    assert [(r.idx, r.error) for r in late] == [
        (i, "worker lost: replica me ran longer than RELAY_BATCH_RESCUE_AFTER_S (900 s)") for i in (0, 1)
    ]
    # Another replica sees "me" as lost: its reservation goes back.
    assert await queue_ops.release_lost_reservations(engine, by="other", stale_after_s=30) == 1


async def test_rescue_discards_items_running_past_the_latest_bound(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)
    await claim_run(engine, "r1", 1)
    await set_back(engine, t.batch_items, "claimed_at", 1000)  # its heartbeat is fresh

    (rescued,) = await queue_ops.rescue(
        engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events
    )

    assert rescued.error == "worker lost: replica r1 ran longer than RELAY_BATCH_RESCUE_AFTER_S (900 s)"
    assert await events(engine, batch_id) == [(0, rescued.error)]
    assert await completed_at(engine, batch_id) is not None


async def test_concurrent_rescuers_rescue_each_item_once(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    batch_ids = [await submit(engine, 20) for _ in range(3)]
    for _ in range(6):
        await claim_run(engine, "dead", 10)
    await queue_ops.forget_worker(engine, "dead")

    results = await asyncio.gather(
        *(
            queue_ops.rescue(r, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)
            for r in replica_engines * 2
        )
    )

    rescued = Counter((item.batch_id, item.idx) for result in results for item in result)
    assert len(rescued) == 60 and set(rescued.values()) == {1}
    for batch_id in batch_ids:
        assert len(await events(engine, batch_id)) == 20
        assert await completed_at(engine, batch_id) is not None


async def test_put_back_returns_items_to_available(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)
    await claim_run(engine, "r1", 3)

    assert await queue_ops.put_back(engine, "r2", [(batch_id, 0)], events_for=put_back_events) == 0
    assert (
        await queue_ops.put_back(engine, "r1", [(batch_id, 0), (batch_id, 1)], events_for=put_back_events)
        == 2
    )

    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"], r["claimed_at"]) for r in rows[:2]] == [
        ("available", None, None)
    ] * 2
    assert rows[2]["state"] == "running"
    assert [c.idx for c in await claim_run(engine, "r2", 5)] == [0, 1]
    assert await events(engine, batch_id) == []


async def test_put_back_cancels_items_of_a_batch_cancelled_meanwhile(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 2)
    await claim_run(engine, "r1", 2)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))  # on another replica

    assert (
        await queue_ops.put_back(engine, "r1", [(batch_id, 0), (batch_id, 1)], events_for=put_back_events)
        == 0
    )

    assert [r["state"] for r in await items(engine, batch_id)] == ["cancelled", "cancelled"]
    assert await events(engine, batch_id) == [(0, "cancelled"), (1, "cancelled")]
    assert await completed_at(engine, batch_id) is not None


async def test_held_by_and_open_counts(engine: AsyncEngine) -> None:
    """The orphan check's view (what the database says a replica runs) and the open-items gauge."""
    first, second = await submit(engine, 4), await submit(engine, 3)
    assert await queue_ops.open_counts(engine) == {"available": 7, "running": 0}
    mine = await claim_run(engine, "r1", 2)
    theirs = await claim_run(engine, "r2", 2)
    assert {c.batch_id for c in mine} != {c.batch_id for c in theirs}  # one batch per claim, fair order
    assert await queue_ops.held_by(engine, "r1") == sorted((c.batch_id, c.idx) for c in mine)
    assert await queue_ops.held_by(engine, "nobody") == []
    assert await complete(engine, "r1", mine[0])
    assert await queue_ops.held_by(engine, "r1") == [(mine[1].batch_id, mine[1].idx)]
    assert await queue_ops.open_counts(engine) == {"available": 3, "running": 3}
    assert {first, second} == {mine[0].batch_id, theirs[0].batch_id}
