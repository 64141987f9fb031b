"""Finish hooks: callbacks the batch engine calls inside the transaction that finishes a batch.

What it does. A batch finishes in exactly one transaction: the one that sets ``completed_at`` (the last
item finalized, a cancel, a rescue, a put back to ``cancelled``, an expiry, or the create of a batch
with no items). That transaction calls :meth:`FinishHooks.run`, which gives every hook the
connection and the batches it finished (:class:`FinishedBatch`), so what a hook writes (a webhook's
outbox row, a façade's ``finalizing`` state) commits or rolls back with the finish itself: exactly once
per batch.

What it deliberately does not know. Which hooks there are (``relay.boot`` builds the
:class:`FinishHooks` of webhooks and the façades and passes it to what finishes batches; the engine
imports neither) and what a hook writes.

Invariants. Hooks run in the order given, with the batches in id order; a hook that raises rolls the
finishing transaction back (the work is then retried like any failed transaction), so a hook must only
write rows, never call out. ``expired``: the batch had an ``expires_at`` and finished at or after it
(its open items were cancelled with ``expired: ``); ``cancelled``: a cancel was requested.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from relay.domain.batch_record import FinishedBatch
from relay.store.engine import Connection

__all__ = ["NO_HOOKS", "FinishHook", "FinishHooks", "FinishedBatch", "log_finished"]

log = logging.getLogger("relay.batches")


FinishHook = Callable[[Connection, Sequence[FinishedBatch]], Awaitable[None]]


class FinishHooks:
    """The finish hooks of one runtime, fixed when it is built (``relay.boot``) and given to the batch
    store that runs them (``relay.store.batch_queue.BatchStore``): no module-level registry, so two
    runtimes in one process never share hooks."""

    __slots__ = ("_hooks",)

    def __init__(self, *hooks: FinishHook) -> None:
        self._hooks: tuple[FinishHook, ...] = hooks

    def __len__(self) -> int:
        return len(self._hooks)

    async def run(self, conn: Connection, finished: Sequence[FinishedBatch]) -> None:
        """Call every hook, in order, with the batches in id order, inside ``conn``'s transaction."""
        if not finished:
            return
        ordered = sorted(finished, key=lambda batch: batch.id)
        for hook in self._hooks:
            await hook(conn, ordered)


NO_HOOKS: Final = FinishHooks()  # immutable: none (a store built without hooks runs none either)


async def log_finished(_conn: Connection, finished: Sequence[FinishedBatch]) -> None:
    """The finish hook that logs one INFO line per finished batch: how it ended and its item counts.

    Boot puts it last, so a hook that raises before it rolls the finish back unlogged. It writes no row;
    a line is written twice only if the finishing transaction's COMMIT itself fails after the hooks ran
    and the finish is then retried."""
    for batch in finished:
        ended = "cancelled" if batch.cancelled else "expired" if batch.expired else "completed"
        counts = ", ".join(f"{state} {n}" for state, n in sorted(batch.counts.items())) or "no items"
        log.info(
            "batch %s finished (%s): %s",
            batch.id,
            ended,
            counts,
            extra={
                "event": "batch_finished",
                "batch_id": batch.id,
                "api": batch.api,
                "project_id": batch.project_id,
                "ended": ended,
                **{f"items_{state}": n for state, n in batch.counts.items()},
            },
        )
