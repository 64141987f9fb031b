"""A batch's final-state counters (``batch_counters``, SPEC §10.2's constant-cost view, §17 "Scale") on
real SQLite and Postgres: after every kind of transition that makes items final — complete, discard,
cancel (in chunks, past one chunk), expiry, a stop's put back of a cancelled batch's item, the rescue
of a dead replica's items — the counts the status view reads equal a COUNT(*) over the items, and a
retry batch starts its own counters without touching the original's."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.batch_retry import RetrySelection
from relay.store import batches as batch_store
from relay.store import tables as t
from relay.store.batch_queue import BatchStore, _submit
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import (
    batch_row,
    cancel_events,
    claim_run,
    complete,
    finalize,
    item_event,
    put_back_events,
    rescue_events,
    set_back,
    submit,
)
from tests.integration.batches.test_engine_apis import expire_now
from tests.integration.batches.test_expiry import openai_batch


async def counts(engine: AsyncEngine, batch_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """(what the counters say, what counting the items says), read in one transaction."""
    async with engine.begin() as conn:
        kept = (await batch_store.item_counts(conn, [batch_id]))[batch_id]
        counted = await batch_store.counted_item_states(conn, batch_id)
    view = await queue_ops.batch_view(engine, batch_id, items=False)
    assert view is not None and view.counts == kept
    return kept, counted


async def assert_counted(engine: AsyncEngine, batch_id: str, expected: dict[str, int]) -> None:
    kept, counted = await counts(engine, batch_id)
    assert kept == counted == expected


async def test_complete_and_discard_are_counted(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5)
    await assert_counted(engine, batch_id, {"available": 5})
    first, second, third = await claim_run(engine, "r1", 3)
    await assert_counted(engine, batch_id, {"available": 2, "running": 3})
    assert await complete(engine, "r1", first)
    error = "upstream returned 500"
    assert await finalize(
        engine, "r1", batch_id, second.idx, state="discarded", status=500, error=error,
        event=item_event(batch_id, second.idx, error),
    )  # fmt: skip
    await assert_counted(engine, batch_id, {"available": 2, "running": 1, "completed": 1, "discarded": 1})
    # A second finalize of a final item changes nothing, counters included.
    assert not await complete(engine, "r1", first)
    assert await complete(engine, "r1", third)
    await assert_counted(engine, batch_id, {"available": 2, "completed": 2, "discarded": 1})


async def test_a_cancel_larger_than_one_chunk_cancels_every_waiting_item(engine: AsyncEngine) -> None:
    n = _submit.CANCEL_CHUNK * 2 + 7
    batch_id = await submit(engine, n)
    (running,) = await claim_run(engine, "r1", 1)
    reserved = await queue_ops.claim(engine, "r2", 4)  # reserved ahead, not started: cancelled too
    assert len(reserved) == 4

    cancelled = await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))

    assert cancelled == list(range(1, n))
    await assert_counted(engine, batch_id, {"running": 1, "cancelled": n - 1})
    async with engine.connect() as conn:
        events = (
            await conn.execute(
                select(t.usage_events.c.batch_idx).where(t.usage_events.c.batch_id == batch_id)
            )
        ).scalars()
        assert sorted(events) == list(range(1, n))  # one event per cancelled item, none twice
    assert await queue_ops.start(engine, "r2", [(c.batch_id, c.idx) for c in reserved]) == set()
    assert await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id)) == []
    assert await complete(engine, "r1", running)
    await assert_counted(engine, batch_id, {"completed": 1, "cancelled": n - 1})
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.completed_at is not None and record.status == "cancelled"


async def test_small_chunks_cancel_everything_and_a_cut_cancel_is_finished_by_a_repeat(
    engine: AsyncEngine,
) -> None:
    batch_id = await submit(engine, 10)
    store = BatchStore(engine)
    calls: list[int] = []

    def events_for(idxs: list[int]) -> list:  # type: ignore[type-arg]
        calls.append(len(idxs))
        if len(calls) == 2:
            raise RuntimeError("the process died between two chunks")
        return cancel_events(batch_id)(idxs)

    try:
        await _submit.cancel(store.engine, batch_id, events_for=events_for, chunk=3)
    except RuntimeError:
        pass
    await assert_counted(engine, batch_id, {"available": 7, "cancelled": 3})
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.status == "cancelled"
    assert await queue_ops.claim(engine, "r1", 5) == []  # a cancelled batch is never claimed again

    done = await _submit.cancel(store.engine, batch_id, events_for=cancel_events(batch_id), chunk=3)
    assert done == list(range(3, 10))
    await assert_counted(engine, batch_id, {"cancelled": 10})
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.completed_at is not None


async def test_expiry_is_counted(engine: AsyncEngine) -> None:
    batch_id = await openai_batch(engine, 4, expires_in_s=3600)
    (running,) = await claim_run(engine, "r1", 1)
    await expire_now(engine, batch_id)
    await queue_ops.expire_due(engine)
    await assert_counted(engine, batch_id, {"running": 1, "cancelled": 3})
    assert await complete(engine, "r1", running)
    await assert_counted(engine, batch_id, {"completed": 1, "cancelled": 3})


async def test_put_back_of_a_cancelled_batch_and_rescue_are_counted(engine: AsyncEngine) -> None:
    stopped = await submit(engine, 2)
    await claim_run(engine, "r1", 2)
    await queue_ops.cancel(engine, stopped, events_for=cancel_events(stopped))
    assert (
        await queue_ops.put_back(engine, "r1", [(stopped, 0), (stopped, 1)], events_for=put_back_events) == 0
    )
    await assert_counted(engine, stopped, {"cancelled": 2})

    lost = await submit(engine, 3)
    await claim_run(engine, "dead", 2)
    await set_back(engine, t.batch_workers, "heartbeat_at", 120)
    rescued = await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)
    assert len(rescued) == 2
    await assert_counted(engine, lost, {"available": 1, "discarded": 2})


async def test_a_retry_batch_has_its_own_counters(engine: AsyncEngine) -> None:
    original = await submit(engine, 3)
    claimed = await claim_run(engine, "r1", 3)
    assert await complete(engine, "r1", claimed[0])
    for item in claimed[1:]:
        assert await finalize(
            engine, "r1", original, item.idx, state="discarded", status=500, error="upstream returned 500",
            event=item_event(original, item.idx, "upstream returned 500"),
        )  # fmt: skip
    row = batch_row(retry_of=original)
    chosen = RetrySelection(states=("discarded",), errors=None)
    await BatchStore(engine).insert_retry_batch(row, chosen, 2, copy_request_chunks=False)
    await assert_counted(engine, row["id"], {"available": 2})
    await assert_counted(engine, original, {"completed": 1, "discarded": 2})


async def test_sqlite_counts_running_items_through_their_index(engine: AsyncEngine) -> None:
    """Left to itself SQLite's planner counts a batch's running items by walking every item of the
    batch on the primary key (450 ms at a million items): the status view names the partial index."""
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's planner")
    async with engine.connect() as conn:
        plan = await conn.execute(
            text("EXPLAIN QUERY PLAN SELECT " + batch_store._SQLITE_RUNNING + " FROM batches WHERE id = 'x'")
        )
        details = " ".join(str(row[-1]) for row in plan)
    assert "ix_batch_items_running" in details and "autoindex_batch_items" not in details, details
