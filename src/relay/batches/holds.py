"""Policies whose batch items are held back by pacing (SPEC §17 ``pacing: "wait"``).

Also :class:`ItemHeld`, what the runner raises for such an item (the worker pool catches it).

Why. An item under ``pacing: "wait"`` that finds no room (its policy's batch share of a rule spent,
``batch.max_concurrency`` reached, or every key of its host open) is put back ``available`` and its
policy is held: the worker pool's claims pass over the policy's batches
(``BatchStore.claim(skip_policies=...)``) until the hold ends, so other policies' items keep the worker
slots and nothing polls the limiter faster than :data:`MIN_HOLD_S` per policy.

What it deliberately does not know: limits, the database, workers. It is a clock and a table.

Invariants: a hold lasts at least :data:`MIN_HOLD_S` (less only when the caller kept its tries that
far apart itself: the rest of a window known to be spent) and at most what it was given (the window's reset,
the next half-open moment); a longer hold is never shortened by a shorter one, except by
:meth:`PolicyHolds.lift` (a ``max_concurrency`` lease of the policy was released on this replica).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: SPEC §17: a held policy is tried again at most every 100 ms.
MIN_HOLD_S = 0.1


class PolicyHolds:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, tuple[float, str]] = {}  # policy id → (monotonic end, meter)

    def hold(self, policy_id: str, seconds: float, meter: str, minimum: float = MIN_HOLD_S) -> float:
        """Hold ``policy_id`` for ``seconds`` (at least ``minimum``: :data:`MIN_HOLD_S` unless the
        caller already kept its tries that far apart); returns the hold's length."""
        seconds = max(minimum, seconds)
        until = self._clock() + seconds
        current = self._until.get(policy_id)
        if current is None or current[0] < until:
            self._until[policy_id] = (until, meter)
        return seconds

    def lift(self, policy_id: str, meter: str) -> None:
        """End the policy's hold now if it was for ``meter`` (room was made on this replica)."""
        current = self._until.get(policy_id)
        if current is not None and current[1] == meter:
            del self._until[policy_id]

    def is_held(self, policy_id: str) -> bool:
        current = self._until.get(policy_id)
        if current is None:
            return False
        if current[0] <= self._clock():
            del self._until[policy_id]
            return False
        return True

    def next_end(self) -> float | None:
        """Seconds until the earliest hold ends (None: nothing is held), so the claims resume then."""
        if not self._until:
            return None
        return max(0.0, min(until for until, _ in self._until.values()) - self._clock())

    def held(self) -> tuple[str, ...]:
        """The policies held now (for the claim's ``skip_policies``); forgets ended holds."""
        now = self._clock()
        for policy_id in [p for p, (until, _) in self._until.items() if until <= now]:
            del self._until[policy_id]
        return tuple(self._until)


#: The meter an item held back by open keys is counted under (``relay_batch_pacing_waits_total``).
OPEN_KEYS = "open_keys"


class ItemHeld(Exception):
    """Under ``pacing: "wait"`` (SPEC §17): the item found no room and must not start now. Nothing is
    taken; the worker pool puts it back ``available`` and holds ``policy_id`` for ``retry_after``
    seconds. ``meter``: the refusing rule's meter, ``max_concurrency`` or :data:`OPEN_KEYS`."""

    def __init__(
        self, policy_id: str, retry_after: float, meter: str, share: int | None = None, exact: bool = False
    ) -> None:
        super().__init__(f"held back by {meter} for {retry_after:g} s")
        self.policy_id = policy_id
        self.retry_after = retry_after
        self.meter = meter
        self.share = share  # items the refusing ``requests`` rule admits per window (None: not a count)
        self.exact = exact  # ``retry_after`` already keeps the 100 ms between tries (BatchRefused.exact)
