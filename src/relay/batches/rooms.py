"""The batch share of a paced policy's reopened window, claimed in steps (SPEC §17 ``pacing: "wait"``).

Why. When a paced policy's hold ends its window opens with its whole batch share free, and the worker
pool claims that many items at once so the share is in hand as the window starts
(``relay.batches.admissions``). One claim of a whole share held the event loop while its rows were
decoded and their bodies read ahead: on SQLite (whose claim runs in this process) live p99 beside a
paced batch rose by tens of milliseconds at every window boundary. So the share is claimed in steps of
at most :data:`ROOM_CLAIM_STEP` items (per backend), one per dispatch step; the steps follow one
another at once, and live requests run between them.

What it deliberately does not know: the database, the claim itself, limits. The worker pool says what
each claim brought back; the holds (``relay.batches.holds``) say which policies wait.

Invariants: never more than the learnt share (at most :data:`MAX_ROOM_CLAIM`) is claimed for one
reopened window; what is left of it lapses when the policy is held again (its window is spent) or a
claim shows nothing more of it to take.
"""

from __future__ import annotations

from relay.batches.holds import PolicyHolds

#: The most items claimed for a paced policy's reopened window (its batch share, when lower).
MAX_ROOM_CLAIM = 1000
#: Items per claim of a reopened window, per backend (docs/benchmarks.md, "A paced batch beside live
#: traffic"): SQLite's claim runs in the process, its thread and the loop sharing the GIL, so it is cut
#: in steps; Postgres's runs in the server (the loop only decodes its rows), and steps there cost the
#: batch part of its share when measured, so it stays one claim.
ROOM_CLAIM_STEP = {"sqlite": 64, "postgresql": MAX_ROOM_CLAIM}


class WindowRooms:
    """Per paced policy: its batch share per window (learnt from a refusal), and once its hold ends
    the part of that share not claimed yet."""

    def __init__(self, holds: PolicyHolds, step: int) -> None:
        if step < 1:
            raise ValueError("a claim step takes at least one item")
        self._holds = holds
        self._step = step
        self._shares: dict[str, int] = {}  # held policies → their batch share per window
        self._left: dict[str, int] = {}  # reopened policies → share not claimed yet

    def learn(self, policy_id: str, share: int) -> None:
        """The policy is held with this batch share per window: claim it when the hold ends."""
        self._shares[policy_id] = share
        self._left.pop(policy_id, None)

    def next_claim(self) -> tuple[set[str], int]:
        """The policies whose reopened window is being claimed, and how many items to claim now for
        them: one step of the largest share left (0: none)."""
        for policy in [p for p in self._shares if not self._holds.is_held(p)]:
            self._left[policy] = min(self._shares.pop(policy), MAX_ROOM_CLAIM)
        for policy in [p for p in self._left if self._holds.is_held(p)]:
            del self._left[policy]  # held again: its window is spent
        if not self._left:
            return set(), 0
        policies = set(self._left)
        room = min(max(self._left.values()), self._step)
        for policy in policies:
            left = self._left[policy] - room
            if left > 0:
                self._left[policy] = left
            else:
                del self._left[policy]
        return policies, room

    def exhausted(self, policies: set[str]) -> None:
        """A claim for these policies' windows brought back fewer items than asked, or another
        policy's: nothing more of theirs to claim in this window."""
        for policy in policies:
            self._left.pop(policy, None)
