"""Batch admissions taken in blocks (SPEC §17 ``pacing: "wait"``): one atomic step admits many items.

Why. A paced batch item is admitted while its window's count (live and batch together) is below the
batch share. Admitted one by one as items start, a fresh window is shared with the live requests that
arrive while the batch works through it: at 100 live requests/s, a batch that needs half a second to
start its share loses 50 of it to them, every window. Admitted as a block when the window opens, the
batch takes its share at once and runs it through the window; live traffic still finds ``limit −
share`` (SPEC §17), as with one-by-one admission. A block cut short by the share (or holding all of
it) means the window is spent: the policy's items then wait for its end without asking again.

The rule. When an item's admission is due and the worker pool has ``demand`` items of the same policy
in hand (reserved or being prepared), :meth:`BlockAdmissions.admit` asks the limiter for up to that
many at once (``RateLimiter.reserve_batch_block``) and keeps what it was granted for the policy's next
items. A grant is used only before its window ends (less :data:`SEND_MARGIN_S`, so the item reaches the
upstream inside the window it was counted in), only by items of the same policy object (a catalog change
starts over), and only for plans the limiter admits in blocks (``requests`` rules per policy); any other
item is admitted one by one as before. One block request per policy at a time.

What it deliberately does not know: which items exist (the worker pool passes ``demand``), limits and
windows (the limiter), the database.

Invariants: never more items run on a block than it granted; an unused admission is never carried into
another window (it lapses, so a window's batch items at the upstream never exceed its share).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from relay.batches.holds import MIN_HOLD_S
from relay.request.auth import Principal
from relay.request.pipeline import Pipeline
from relay.request.reservations import EMPTY_RESERVATION, BatchRefused, Reservation
from relay.snapshot import Policy

#: A granted admission is used only while this much of its window is left (the start and the send).
SEND_MARGIN_S = 0.05
SPENT = "rate limit exceeded: the batch share of this window is spent"


class BlockAdmissions:
    def __init__(self, pipeline: Pipeline, clock: Callable[[], float] = time.time) -> None:
        self._pipeline = pipeline
        self._clock = clock
        self._grants: dict[str, tuple[Policy, int, float]] = {}  # policy id → (policy, left, until)
        self._asking: dict[str, asyncio.Lock] = {}  # one block request per policy at a time
        self._blocked: set[str] = set()  # policies admitted in blocks (their plans allow it)
        # Policy id → (policy, window end, when its block was asked for, share): the block was cut
        # short, so the window's share is spent; its items wait for the next window without asking
        # again (unless the policy changed since: a new limit may leave room).
        self._spent: dict[str, tuple[Policy, float, float, int]] = {}

    async def admit(self, principal: Principal, demand: int) -> Reservation:
        """Admit one item of ``principal``'s policy: from the policy's current grant, else from a new
        block of up to ``demand`` (``demand`` > 1), else alone (``Pipeline.admit_batch``). Raises what
        ``admit_batch`` raises (``BatchRefused``: no room; ``BudgetExceeded``)."""
        policy = principal.policy
        if self._take(policy):
            return EMPTY_RESERVATION
        spent = self._spent.get(policy.id)
        if spent is not None:
            spent_for, until, asked_at, share = spent
            now = self._clock()
            if spent_for is policy and now < until:
                wait_s = max(until - now, asked_at + MIN_HOLD_S - now)
                raise BatchRefused(SPENT, retry_after=wait_s, meter="requests", share=share, exact=True)
            del self._spent[policy.id]
        if demand <= 1:
            return await self._pipeline.admit_batch(principal)
        lock = self._asking.get(policy.id)
        if lock is None:
            lock = self._asking[policy.id] = asyncio.Lock()
        async with lock:
            if self._take(policy):  # another item's block came back meanwhile
                return EMPTY_RESERVATION
            asked_at = self._clock()
            grant = await self._pipeline.admit_batch_block(policy, demand, min_left_s=SEND_MARGIN_S)
        if grant is None:
            self._blocked.discard(policy.id)
            return await self._pipeline.admit_batch(principal)
        self._blocked.add(policy.id)
        self._grants[policy.id] = (policy, grant.granted - 1, grant.until)
        if grant.full:
            self._spent[policy.id] = (policy, grant.until, asked_at, grant.share)
        return EMPTY_RESERVATION

    def covers(self, policy_id: str, on_the_way: int) -> bool:
        """Whether one more item of the policy may start now, given ``on_the_way`` of its items
        already started and not admitted yet: always for a policy not admitted in blocks; for one
        that is, while its grant has an admission left for it or nothing is on its way (the first
        item asks for the next block, and the others wait for it rather than each asking the
        limiter: they then start from the block)."""
        if policy_id not in self._blocked or not on_the_way:
            return True
        return self.left(policy_id) > on_the_way

    def left(self, policy_id: str) -> int:
        """Admissions of the policy's current grant not used yet (0 once it lapsed)."""
        entry = self._grants.get(policy_id)
        if entry is None or self._clock() >= entry[2] - SEND_MARGIN_S:
            return 0
        return entry[1]

    def _take(self, policy: Policy) -> bool:
        entry = self._grants.get(policy.id)
        if entry is None:
            return False
        granted_for, left, until = entry
        if granted_for is not policy or left <= 0 or self._clock() >= until - SEND_MARGIN_S:
            del self._grants[policy.id]
            return False
        self._grants[policy.id] = (granted_for, left - 1, until)
        return True
