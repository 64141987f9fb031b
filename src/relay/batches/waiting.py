"""Batch items this replica put back for want of room (SPEC §17 ``pacing: "wait"``), per policy, until
one of them is admitted or their batch is cancelled: what the ``relay_batch_items_waiting`` gauge shows.

It exists so the worker pool (``relay.batches.workers``) keeps claiming, running and stopping items while
this table keeps the count its metric reports. It deliberately does not know holds (``relay.batches.holds``
says which policies wait and for how long), the database or the runner.

Invariants: a policy with no waiting item has no entry (and its gauge reads 0); the gauge is set on every
change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from relay.telemetry.metrics import BatchMetrics

_Key = tuple[str, int]


class WaitingItems:
    def __init__(self, metrics: BatchMetrics | None) -> None:
        self._metrics = metrics
        self._waiting: dict[str, set[_Key]] = {}  # policy id → items put back for room, not run since

    def add(self, policy_id: str, keys: Iterable[_Key]) -> None:
        """``keys`` of ``policy_id`` were put back ``available``: no room for them."""
        self._waiting.setdefault(policy_id, set()).update(keys)
        self._changed(policy_id)

    def admitted(self, key: _Key, policy_id: str) -> None:
        waiting = self._waiting.get(policy_id)
        if waiting is not None and key in waiting:
            waiting.discard(key)
            self._changed(policy_id)

    def forget_batch(self, batch_id: str) -> None:
        """The batch was cancelled: its items wait no more."""
        for policy_id, waiting in list(self._waiting.items()):
            if any(key[0] == batch_id for key in waiting):
                waiting.difference_update([key for key in waiting if key[0] == batch_id])
                self._changed(policy_id)

    def _changed(self, policy_id: str) -> None:
        waiting = self._waiting.get(policy_id, set())
        if self._metrics is not None:
            self._metrics.waiting.labels(policy_id).set(len(waiting))
        if not waiting:
            self._waiting.pop(policy_id, None)
