"""The ``RELAY_BATCH_ITEM_TIMEOUT_S`` budgets of a runner's running items, kept by ONE timer (SPEC §10.4).

Why not ``asyncio.timeout`` per item. It is correct but costs, per item, a context manager whose
enter and exit are coroutines, a timer armed and disarmed, and its rescheduling logic: at a 0 ms
upstream that was a few per cent of a batch item's CPU. Every item of a runner has the same budget,
counted from its start, so the deadlines come in start order: the oldest running item always expires
first, and one timer set for it covers them all. An item enters (an O(1) append) and leaves (an O(1)
removal); the timer fires about once per budget, or when the oldest item really is overdue.

What it does on expiry is what ``asyncio.timeout`` does: it cancels the item's task and, when the
item leaves, takes that cancellation back (``Task.uncancel``); the item's budget is what ended it only
if no other cancellation arrived meanwhile (the caller then turns it into the ``timeout`` discard), so
a cancel or a shutdown still propagates, and a ``TimeoutError`` raised below is never taken for it.

Invariants. An entry is in the table from :meth:`ItemDeadlines.enter` until :meth:`ItemDeadlines.leave`
or its expiry, whichever comes first; the timer is armed whenever the table is not empty (it may fire
early, for an item that has left: it then re-arms for the oldest one left).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict


class Deadline:
    """One running item's budget: its task, when it ends, and whether it was spent."""

    __slots__ = ("at", "cancelling", "expired", "task")

    def __init__(self, task: asyncio.Task[object], at: float) -> None:
        self.task = task
        self.at = at  # the event loop's clock
        self.cancelling = task.cancelling()  # cancellations already requested when it started
        self.expired = False


class ItemDeadlines:
    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self._running: OrderedDict[Deadline, None] = OrderedDict()  # in start order: oldest first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def enter(self) -> Deadline:
        """The current task's item starts now: it is cancelled once the budget is spent."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (tests): nothing of the old one carries over
            self._loop, self._timer = loop, None
            self._running.clear()
        task = asyncio.current_task()
        assert task is not None, "an item runs in a task"
        deadline = Deadline(task, loop.time() + self.budget_s)
        self._running[deadline] = None
        if self._timer is None:
            self._timer = loop.call_at(deadline.at, self._expire)
        return deadline

    def leave(self, deadline: Deadline) -> bool:
        """The item stopped (answered, failed or cancelled). True when its budget alone stopped it:
        it was spent and no other cancellation is pending (the caller reports a timeout); a budget
        spent takes its own cancellation back either way. Idempotent: only the first call counts."""
        self._running.pop(deadline, None)
        if not deadline.expired:
            return False
        deadline.expired = False  # taken back once: leaving again is a no-op
        return deadline.task.uncancel() <= deadline.cancelling

    def _expire(self) -> None:
        """Cancel every item past its deadline (the oldest first), then wait for the next one."""
        loop = self._loop
        if loop is None or asyncio.get_running_loop() is not loop:
            return  # armed on an event loop the table has left since
        self._timer = None
        now = loop.time()
        running = self._running
        while running:
            oldest = next(iter(running))
            if oldest.at > now:
                self._timer = loop.call_at(oldest.at, self._expire)
                return
            running.popitem(last=False)
            oldest.expired = True
            oldest.task.cancel()
