"""Batch expiry on real SQLite and Postgres (SPEC §14, §15): a batch past its ``expires_at`` starts no
item even before the sweep runs, "expired" means the expiry cancelled an item (not that the last item
ended late), and the sweep reaches every due batch however many earlier ones are stuck."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batch_apis.openai_service import outcome_of
from relay.batches import expiry
from relay.domain.batches import mint_batch_id
from relay.store import batches as batch_store
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from tests.integration.batches import queue_ops
from tests.integration.batches.conftest import Finished
from tests.integration.batches.queue_helpers import claim_run, complete, items, submit
from tests.integration.batches.test_engine_apis import expire_now


async def openai_batch(engine: AsyncEngine, n: int, *, expires_in_s: float) -> str:
    return await submit(
        engine,
        n,
        id=mint_batch_id("openai"),
        api="openai",
        expires_at=datetime.now(UTC) + timedelta(seconds=expires_in_s),
    )


async def test_a_claim_skips_a_batch_past_its_deadline_before_any_sweep(engine: AsyncEngine) -> None:
    await openai_batch(engine, 2, expires_in_s=-60)
    assert await queue_ops.claim(engine, "r1", 5) == []
    alive = await openai_batch(engine, 1, expires_in_s=3600)
    assert [c.batch_id for c in await queue_ops.claim(engine, "r1", 5)] == [alive]


async def test_a_reserved_item_of_a_batch_that_expired_meanwhile_never_starts(engine: AsyncEngine) -> None:
    batch_id = await openai_batch(engine, 2, expires_in_s=3600)
    claimed = await queue_ops.claim(engine, "r1", 2)
    assert len(claimed) == 2
    await expire_now(engine, batch_id)
    assert await queue_ops.start(engine, "r1", [(c.batch_id, c.idx) for c in claimed]) == set()
    assert [r["state"] for r in await items(engine, batch_id)] == ["available", "available"]
    await queue_ops.expire_due(engine)
    assert [r["state"] for r in await items(engine, batch_id)] == ["cancelled", "cancelled"]


async def test_a_last_item_succeeding_after_the_deadline_leaves_the_batch_completed(
    engine: AsyncEngine,
    finished: Finished,
) -> None:
    batch_id = await openai_batch(engine, 1, expires_in_s=3600)
    claimed = await claim_run(engine, "r1", 1)
    await expire_now(engine, batch_id)  # the deadline passes while it runs, before any sweep
    assert await complete(engine, "r1", claimed[0], hooks=finished.hooks)
    assert [(b.id, b.expired, b.cancelled) for b in finished] == [(batch_id, False, False)]
    async with engine.connect() as conn:
        row = await batch_store.get_batch(conn, batch_id)
        expired = await batch_store.has_expired_items(conn, batch_id)
    assert row is not None and expired is False and outcome_of(row, expired=expired) == "completed"


async def test_a_batch_whose_expiry_cancelled_an_item_is_expired(
    engine: AsyncEngine,
    finished: Finished,
) -> None:
    batch_id = await openai_batch(engine, 2, expires_in_s=3600)
    claimed = await claim_run(engine, "r1", 1)
    await expire_now(engine, batch_id)
    await queue_ops.expire_due(engine, hooks=finished.hooks)
    assert finished == []  # idx 0 still runs
    assert await complete(engine, "r1", claimed[0], hooks=finished.hooks)  # it succeeds after the sweep
    assert [(b.id, b.expired, b.counts) for b in finished] == [
        (batch_id, True, {"completed": 1, "cancelled": 1})
    ]
    async with engine.connect() as conn:
        row = await batch_store.get_batch(conn, batch_id)
        expired = await batch_store.has_expired_items(conn, batch_id)
    assert row is not None and expired is True and outcome_of(row, expired=expired) == "expired"


async def test_a_due_batch_left_with_only_a_dead_replicas_item_does_not_hold_later_ones_back(
    engine: AsyncEngine,
) -> None:
    stuck = await openai_batch(engine, 1, expires_in_s=3600)
    await claim_run(engine, "dead", 1)  # its only item runs on a replica that died
    later = await openai_batch(engine, 1, expires_in_s=3600)
    await expire_now(engine, stuck)  # five minutes ago
    async with engine.begin() as conn:  # due too, a minute ago: later than ``stuck``
        await conn.execute(
            update(t.batches)
            .where(t.batches.c.id == later)
            .values(expires_at=datetime.now(UTC) - timedelta(minutes=1))
        )
    assert await queue_ops.expire_due_batches(engine, 1, expiry._expiry_events) != []
    assert [r["state"] for r in await items(engine, later)] == ["cancelled"]
    assert [r["state"] for r in await items(engine, stuck)] == ["running"]  # rescue's business
    assert (
        await queue_ops.expire_due_batches(engine, 1, expiry._expiry_events) == []
    )  # nothing left to cancel


async def test_the_sweeper_stops_this_replicas_items_of_a_batch_another_replica_swept(
    engine: AsyncEngine,
) -> None:
    batch_id = await openai_batch(engine, 2, expires_in_s=3600)
    await claim_run(engine, "r1", 1)
    await expire_now(engine, batch_id)
    assert [r.id for r in await queue_ops.expire_due(engine)] == [batch_id]  # "another replica" sweeps
    stopped: list[tuple[str, str]] = []

    async def stop_running(stopped_id: str, error: str) -> None:
        stopped.append((stopped_id, error))

    here = expiry.ExpirySweeper(BatchStore(engine), 60, stop_running, instance_id="r1")
    assert await here.sweep() == []  # nothing left to cancel, yet r1's running item is stopped
    assert [(b, e.startswith("expired: ")) for b, e in stopped] == [(batch_id, True)]
    assert await expiry.ExpirySweeper(BatchStore(engine), 60, stop_running, instance_id="r2").sweep() == []
    assert len(stopped) == 1
