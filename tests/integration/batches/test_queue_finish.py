"""The batch store's final states on real SQLite and Postgres: finalize (one item, a group in one
transaction, concurrent finishers completing a batch once) and cancel.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.hooks import FinishedBatch, FinishHooks
from relay.domain.batches import ResponseRef
from relay.store import tables as t
from relay.usage.event import UsageEvent
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import (
    cancel_events,
    claim_run,
    complete,
    completed_at,
    events,
    finalize,
    item_event,
    items,
    rescue_events,
    submit,
)

# ---------------------------------------------------------------------------------------------- finalize


async def test_finalize_writes_one_event_and_completes_the_batch_at_the_end(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 2)
    first, _ = await claim_run(engine, "r1", 2)

    assert await complete(engine, "r1", first)
    assert await completed_at(engine, batch_id) is None
    assert await finalize(
        engine,
        "r1",
        batch_id,
        1,
        state="discarded",
        status=500,
        error="upstream returned 500",
        event=item_event(batch_id, 1, "upstream returned 500"),
    )

    assert await completed_at(engine, batch_id) is not None
    assert await events(engine, batch_id) == [(0, None), (1, "upstream returned 500")]
    rows = await items(engine, batch_id)
    assert [(r["state"], r["status"], r["error"]) for r in rows] == [
        ("completed", 200, None),
        ("discarded", 500, "upstream returned 500"),
    ]
    assert all(r["finished_at"] is not None for r in rows)
    # A second finalize of a finished item writes nothing.
    assert not await complete(engine, "r1", first)
    assert len(await events(engine, batch_id)) == 2


async def test_a_finalize_failing_at_its_last_step_writes_nothing(engine: AsyncEngine) -> None:
    """Every statement of a finalize commits with its transaction or not at all (on Postgres they run
    on the driver itself, ``relay.store.driver``): a finish hook that raises, the last step, leaves the
    items running with no event, no counter, no rollup row and no completion; the retry settles them."""
    batch_id = await submit(engine, 2)
    claimed = await claim_run(engine, "r1", 2)
    finals = [
        queue_ops.FinalItem(c.batch_id, c.idx, "completed", 200, None, item_event(c.batch_id, c.idx))
        for c in claimed
    ]

    async def failing(conn: AsyncConnection, batches: Sequence[FinishedBatch]) -> None:
        raise RuntimeError("the hook failed")

    with pytest.raises(RuntimeError, match="the hook failed"):
        await queue_ops.finalize_many(engine, "r1", finals, hooks=FinishHooks(failing))

    assert [r["state"] for r in await items(engine, batch_id)] == ["running", "running"]
    assert await events(engine, batch_id) == []
    assert await completed_at(engine, batch_id) is None
    async with engine.connect() as conn:
        assert (await conn.execute(select(t.batch_counters.c.batch_id))).all() == []
        assert (await conn.execute(select(t.usage_rollup.c.requests))).all() == []
    assert await queue_ops.finalize_many(engine, "r1", finals) == {(batch_id, 0), (batch_id, 1)}
    assert await completed_at(engine, batch_id) is not None


async def test_finalize_by_another_replica_or_after_rescue_writes_nothing(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)
    (item,) = await claim_run(engine, "r1", 1)
    assert not await complete(engine, "r2", item)

    await queue_ops.forget_worker(engine, "r1")  # r1 is gone
    rescued = await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)
    assert [(r.batch_id, r.idx) for r in rescued] == [(batch_id, 0)]

    assert not await complete(engine, "r1", item)
    (row,) = await items(engine, batch_id)
    assert (row["state"], row["error"]) == (
        "discarded",
        "worker lost: replica r1 stopped before finishing the item",
    )
    assert await events(engine, batch_id) == [
        (0, "worker lost: replica r1 stopped before finishing the item")
    ]
    assert await completed_at(engine, batch_id) is not None


async def test_finalize_refuses_what_the_schema_would(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)
    (item,) = await claim_run(engine, "r1", 1)
    event = item_event(batch_id, 0)
    with pytest.raises(ValueError, match="final"):
        await finalize(engine, "r1", batch_id, 0, state="running", status=None, error=None, event=event)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="error"):
        await finalize(engine, "r1", batch_id, 0, state="discarded", status=None, error=None, event=event)
    with pytest.raises(ValueError, match="usage event"):
        await finalize(
            engine,
            "r1",
            batch_id,
            0,
            state="completed",
            status=200,
            error=None,
            event=item_event(batch_id, 9),
        )
    assert (await items(engine, batch_id))[0]["state"] == "running"
    assert await complete(engine, "r1", item)


# ---------------------------------------------------------------------------------------------- cancel


async def test_cancel_cancels_available_items_once_and_leaves_running_ones(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5)
    running = await claim_run(engine, "r1", 2)

    assert await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id)) == [2, 3, 4]

    rows = await items(engine, batch_id)
    assert [(r["state"], r["error"]) for r in rows] == [("running", None)] * 2 + [
        ("cancelled", "cancelled")
    ] * 3
    assert all(r["finished_at"] is not None for r in rows[2:])
    assert await events(engine, batch_id) == [(i, "cancelled") for i in (2, 3, 4)]
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and (record.status, record.completed_at) == ("cancelled", None)

    def must_not_be_called(idxs: list[int]) -> list[UsageEvent]:
        raise AssertionError(idxs)

    assert await queue_ops.cancel(engine, batch_id, events_for=must_not_be_called) == []
    assert len(await events(engine, batch_id)) == 3

    # The replica running the items stops one and lets the other finish; the last one completes the batch.
    assert await finalize(
        engine,
        "r1",
        batch_id,
        0,
        state="cancelled",
        status=None,
        error="cancelled",
        event=item_event(batch_id, 0, "cancelled"),
    )
    assert await completed_at(engine, batch_id) is None
    assert await complete(engine, "r1", running[1])
    assert await completed_at(engine, batch_id) is not None
    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None and view.counts == {"completed": 1, "cancelled": 4}


async def test_cancel_with_nothing_running_completes_the_batch(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)
    assert await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id)) == [0, 1, 2]
    assert await completed_at(engine, batch_id) is not None
    assert await queue_ops.cancel(engine, "b_" + "0" * 26, events_for=cancel_events("x")) == []


async def test_cancelling_a_finished_batch_changes_nothing(engine: AsyncEngine) -> None:
    """SPEC §10.2: ``Status`` turns ``cancelled`` only by a cancel that comes before the batch finished,
    and ``CompletedAt`` is set once. A cancel after the last item ended answers (idempotent) and
    writes nothing: no status, no cancel time, no event."""
    batch_id = await submit(engine, 2)
    for item in await claim_run(engine, "r1", 2):
        assert await complete(engine, "r1", item)
    finished = await queue_ops.batch_record(engine, batch_id)
    assert finished is not None and finished.completed_at is not None and finished.status == "queued"

    def must_not_be_called(idxs: list[int]) -> list[UsageEvent]:
        raise AssertionError(idxs)

    for _ in range(2):
        assert await queue_ops.cancel(engine, batch_id, events_for=must_not_be_called) == []
    after = await queue_ops.batch_record(engine, batch_id)
    assert after is not None
    assert (after.status, after.completed_at, after.cancel_requested_at) == (
        "queued",
        finished.completed_at,
        None,
    )
    assert await events(engine, batch_id) == [(0, None), (1, None)]


async def test_cancel_writes_nothing_when_the_events_cannot_be_built(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)

    def broken(idxs: list[int]) -> list[UsageEvent]:
        raise RuntimeError("no events")

    with pytest.raises(RuntimeError):
        await queue_ops.cancel(engine, batch_id, events_for=broken)
    with pytest.raises(ValueError, match="usage event"):
        await queue_ops.cancel(engine, batch_id, events_for=lambda idxs: [])

    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None and view.record.status == "queued" and view.counts == {"available": 3}


async def test_finalize_many_settles_a_group_in_one_transaction(engine: AsyncEngine) -> None:
    """The worker pool's group write: items of several batches in one call; an item no longer ours
    (rescued meanwhile) is left out with no event; each batch left with nothing open is completed; a
    group that names an item twice, or carries a wrong event, writes nothing."""
    first, second = await submit(engine, 2), await submit(engine, 3)
    mine = await claim_run(engine, "r1", 2) + await claim_run(engine, "r1", 3)
    assert {c.batch_id for c in mine} == {first, second}
    lost = next(c for c in mine if c.batch_id == second and c.idx == 2)

    def ref(c: queue_ops.ClaimedItem) -> ResponseRef:
        return ResponseRef("responses-0123456789abcdef.data", 100 * c.idx, 10 + c.idx)

    done_ok = [
        queue_ops.FinalItem(c.batch_id, c.idx, "completed", 200, None, item_event(c.batch_id, c.idx), ref(c))
        for c in mine
    ]
    with pytest.raises(ValueError):
        await queue_ops.finalize_many(engine, "r1", [done_ok[0], done_ok[0]])
    with pytest.raises(ValueError):  # only a completed item has a response
        c = mine[0]
        await queue_ops.finalize_many(
            engine,
            "r1",
            [queue_ops.FinalItem(c.batch_id, c.idx, "discarded", 500, "x", done_ok[0].event, ref(c))],
        )
    with pytest.raises(ValueError):
        wrong = done_ok[0]
        await queue_ops.finalize_many(
            engine,
            "r1",
            [queue_ops.FinalItem(wrong.batch_id, wrong.idx, "completed", 200, None, item_event(second, 9))],
        )
    async with engine.begin() as conn:  # `lost` is no longer r1's: another replica rescued it
        await conn.execute(
            update(t.batch_items)
            .where(t.batch_items.c.batch_id == second, t.batch_items.c.idx == 2)
            .values(claimed_by="r2")
        )

    done = await queue_ops.finalize_many(engine, "r1", done_ok)

    assert done == {(c.batch_id, c.idx) for c in mine if c != lost}
    assert [r["state"] for r in await items(engine, first)] == ["completed", "completed"]
    assert [r["state"] for r in await items(engine, second)] == ["completed", "completed", "running"]
    assert [idx for idx, _ in await events(engine, first)] == [0, 1]
    assert [idx for idx, _ in await events(engine, second)] == [0, 1]
    assert await completed_at(engine, first) is not None
    assert await completed_at(engine, second) is None
    # Each completed item's row says where its response body is; the results read it from there.
    rows = await queue_ops.result_rows(engine, second, after_idx=-1, limit=10)
    assert [r.response for r in rows] == [ref(mine[2]), ref(mine[3]), None]


async def test_a_group_larger_than_one_statement_settles_whole(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite a group is settled by conditional statements of at most ``_SQLITE_SETTLE_ROWS`` items
    and its counters by upserts of at most ``_SQLITE_UPSERT_ROWS`` batches: made small here so a
    group of three batches crosses both boundaries. Every item of the group is settled once, an item
    not ours is left out, each batch's counters add up (Postgres runs the same group as one)."""
    from relay.store.batch_queue import _finish, _tally

    monkeypatch.setattr(_finish, "_SQLITE_SETTLE_ROWS", 3)
    monkeypatch.setattr(_tally, "_SQLITE_UPSERT_ROWS", 2)
    batches = [await submit(engine, n) for n in (3, 4, 2)]
    mine: list[queue_ops.ClaimedItem] = []
    for n in (3, 4, 2):
        mine += await claim_run(engine, "r1", n)
    assert {(c.batch_id, c.idx) for c in mine} == {
        (b, i) for b, n in zip(batches, (3, 4, 2), strict=True) for i in range(n)
    }
    lost = mine[4]  # another replica's now: left out of the group
    async with engine.begin() as conn:
        await conn.execute(
            update(t.batch_items)
            .where(t.batch_items.c.batch_id == lost.batch_id, t.batch_items.c.idx == lost.idx)
            .values(claimed_by="r2")
        )
    finals = [
        queue_ops.FinalItem(
            c.batch_id,
            c.idx,
            "completed" if c.idx % 2 == 0 else "discarded",
            200 if c.idx % 2 == 0 else 500,
            None if c.idx % 2 == 0 else "upstream returned 500",
            item_event(c.batch_id, c.idx, None if c.idx % 2 == 0 else "upstream returned 500"),
        )
        for c in mine
    ]

    done = await queue_ops.finalize_many(engine, "r1", finals)

    assert done == {(c.batch_id, c.idx) for c in mine if c != lost}
    async with engine.connect() as conn:
        counted = {
            row.batch_id: (row.completed, row.discarded, row.cancelled)
            for row in await conn.execute(t.batch_counters.select())
        }
    for batch_id in batches:
        rows = await items(engine, batch_id)
        settled = [r for r in rows if r["state"] != "running"]
        assert counted[batch_id] == (
            sum(r["state"] == "completed" for r in settled),
            sum(r["state"] == "discarded" for r in settled),
            0,
        )
        assert [idx for idx, _ in await events(engine, batch_id)] == [r["idx"] for r in settled]
        assert all(r["finished_at"] is not None for r in settled)
    written = [len(await events(engine, b)) for b in batches]
    assert written == [3, 3, 2]
    assert [r["state"] for r in await items(engine, lost.batch_id)].count("running") == 1
