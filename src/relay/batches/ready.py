"""Claimed batch items waiting for a worker slot, in the fair order of SPEC §17 (``ReadyQueue``).

What it deliberately does not know: the database, limits, running items. It is the worker pool's
ordered in-memory list; ``pop`` may pass over policies the caller says must not start yet (a paced
policy whose next block is being asked for, ``relay.batches.workers``).

Invariants: every item added is returned exactly once, by ``pop`` or a ``drop_*``; ``len`` and
``of_policy`` count what is in it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from relay.store.batch_queue import ClaimedItem

Body = asyncio.Future[bytes | None]  # an item's request body, read ahead when it was claimed


class ReadyQueue:
    """Claimed items waiting for a slot, with their bodies read ahead, in the claim's fair order (SPEC
    §17): round-robin across projects, then across the project's batches, then idx order within a
    batch. So a project whose batch was claimed after another project's claim-ahead does not queue
    behind all of it, and a project with many batches gets no more slots than one with a single batch.
    """

    __slots__ = ("_by_project", "_count", "_per_policy")

    def __init__(self) -> None:
        # project → batch → items; both dicts in turn order (the one served longest ago first).
        self._by_project: dict[str, dict[str, deque[tuple[ClaimedItem, Body | None]]]] = {}
        self._count = 0
        self._per_policy: dict[str, int] = {}  # policy id → its items here

    def __len__(self) -> int:
        return self._count

    def of_policy(self, policy_id: str) -> int:
        return self._per_policy.get(policy_id, 0)

    def _counted(self, policy_id: str, change: int) -> None:
        left = self._per_policy.get(policy_id, 0) + change
        if left > 0:
            self._per_policy[policy_id] = left
        else:
            self._per_policy.pop(policy_id, None)

    def add(self, item: ClaimedItem, body: Body | None) -> None:
        batches = self._by_project.setdefault(item.batch.project_id, {})
        batches.setdefault(item.batch_id, deque()).append((item, body))
        self._count += 1
        self._counted(item.batch.policy_id, 1)

    def pop(self, may_start: Callable[[str], bool] | None = None) -> tuple[ClaimedItem, Body | None] | None:
        """The next item of the project served longest ago, from its batch served longest ago, passing
        over batches whose policy ``may_start`` refuses; ``None`` when nothing may start. The chosen
        project and batch go to the back of their turns; those passed over keep their places."""
        for project_id, batches in self._by_project.items():
            for batch_id, waiting in batches.items():
                if may_start is None or may_start(waiting[0][0].batch.policy_id):
                    return self._take(project_id, batch_id)
        return None

    def _take(self, project_id: str, batch_id: str) -> tuple[ClaimedItem, Body | None]:
        batches = self._by_project.pop(project_id)
        waiting = batches.pop(batch_id)
        entry = waiting.popleft()
        if waiting:
            batches[batch_id] = waiting
        if batches:
            self._by_project[project_id] = batches
        self._count -= 1
        self._counted(entry[0].batch.policy_id, -1)
        return entry

    def drop_policy(self, policy_id: str) -> list[ClaimedItem]:
        """Forget the waiting items of a policy's batches (the policy is held back by pacing)."""
        dropped: list[ClaimedItem] = []
        held = [
            batch_id
            for batches in self._by_project.values()
            for batch_id, waiting in batches.items()
            if waiting[0][0].batch.policy_id == policy_id
        ]
        for batch_id in held:
            dropped += self.drop_batch(batch_id)
        return dropped

    def drop_batch(self, batch_id: str) -> list[ClaimedItem]:
        """Forget a batch's waiting items (a cancel or expiry); returns them."""
        for project_id, batches in self._by_project.items():
            if batch_id in batches:
                dropped = [item for item, _ in batches.pop(batch_id)]
                if not batches:
                    del self._by_project[project_id]
                self._count -= len(dropped)
                if dropped:
                    self._counted(dropped[0].batch.policy_id, -len(dropped))
                return dropped
        return []
