"""relay.batches.deadlines: one timer for every running item's RELAY_BATCH_ITEM_TIMEOUT_S budget, with
``asyncio.timeout``'s semantics (SPEC §10.4: the item is cut short; other cancellations still propagate)."""

from __future__ import annotations

import asyncio

import pytest

from relay.batches.deadlines import ItemDeadlines


async def _item(deadlines: ItemDeadlines, work: float, started: asyncio.Event | None = None) -> str:
    """What the runner does around its pipeline call: "answered", "timeout", or CancelledError."""
    deadline = deadlines.enter()
    try:
        if started is not None:
            started.set()
        await asyncio.sleep(work)
        return "answered"
    except asyncio.CancelledError:
        if not deadlines.leave(deadline):
            raise
        return "timeout"
    finally:
        deadlines.leave(deadline)


async def test_items_past_their_budget_time_out_and_the_others_answer() -> None:
    deadlines = ItemDeadlines(0.2)
    results = await asyncio.gather(
        _item(deadlines, 30.0), _item(deadlines, 0.0), _item(deadlines, 30.0), _item(deadlines, 0.01)
    )
    assert results == ["timeout", "answered", "timeout", "answered"]


async def test_a_timed_out_task_is_not_left_cancelling() -> None:
    """The budget takes its cancellation back: the task can go on awaiting (the runner writes the
    discard and the worker pool hands it to the finalizer)."""
    deadlines = ItemDeadlines(0.05)

    async def item_then_more() -> tuple[str, int]:
        outcome = await _item(deadlines, 30.0)
        await asyncio.sleep(0)
        task = asyncio.current_task()
        assert task is not None
        return outcome, task.cancelling()

    assert await asyncio.create_task(item_then_more()) == ("timeout", 0)


async def test_a_cancel_from_outside_propagates() -> None:
    deadlines = ItemDeadlines(30.0)
    started = asyncio.Event()
    task = asyncio.create_task(_item(deadlines, 30.0, started))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _item(deadlines, 0.0) == "answered"  # the table goes on


async def test_a_cancel_that_meets_the_budget_still_propagates() -> None:
    """Both cancelled it (a batch cancel requested as the budget ran out): the cancel wins, as under
    ``asyncio.timeout``."""
    deadlines = ItemDeadlines(0.05)

    async def item_cancelled_at_its_deadline() -> str:
        deadline = deadlines.enter()
        try:
            await asyncio.sleep(30.0)
            return "answered"
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None and deadline.expired
            task.cancel()  # the batch's cancel, arriving now
            if not deadlines.leave(deadline):
                raise
            return "timeout"

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(item_cancelled_at_its_deadline())


async def test_a_timeout_error_from_below_is_not_the_budget() -> None:
    deadlines = ItemDeadlines(30.0)

    async def item() -> None:
        deadline = deadlines.enter()
        try:
            async with asyncio.timeout(0.01):  # something below with a timeout of its own
                await asyncio.sleep(30.0)
        finally:
            assert not deadline.expired
            deadlines.leave(deadline)

    with pytest.raises(TimeoutError):
        await item()
