"""Finish hooks: callbacks the batch engine calls inside the transaction that finishes a batch.

What it does. A batch finishes in exactly one transaction: the one that sets ``completed_at`` (the last
item finalized, a cancel, a rescue, a put back to ``cancelled``, an expiry, or the create of a batch
with no items). That transaction calls :func:`run_finish_hooks`, which gives every registered hook the
connection and the batches it finished (:class:`FinishedBatch`), so what a hook writes (a webhook's
outbox row, a façade's ``finalizing`` state) commits or rolls back with the finish itself: exactly once
per batch.

What it deliberately does not know. Who registers (``relay.boot`` registers webhooks and the façades;
the engine imports neither) and what a hook writes.

Invariants. Hooks run in registration order, with the batches in id order; a hook that raises rolls the
finishing transaction back (the work is then retried like any failed transaction), so a hook must only
write rows, never call out. ``expired``: the batch had an ``expires_at`` and finished at or after it
(its open items were cancelled with ``expired: ``); ``cancelled``: a cancel was requested.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True, slots=True)
class FinishedBatch:
    id: str
    api: str  # "relay" | "openai" | "anthropic"
    project_id: str
    counts: dict[str, int]  # item state → number, only states present
    cancelled: bool
    expired: bool
    api_status: str | None  # the façade's state as the finishing transaction found it


FinishHook = Callable[[AsyncConnection, Sequence[FinishedBatch]], Awaitable[None]]

_HOOKS: list[FinishHook] = []


def register_finish_hook(hook: FinishHook) -> Callable[[], None]:
    """Call ``hook`` in every transaction that finishes batches, from now on; returns its unregister.
    Registering the same hook again (a second runtime in one process) changes nothing."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)

    def unregister() -> None:
        if hook in _HOOKS:
            _HOOKS.remove(hook)

    return unregister


async def run_finish_hooks(conn: AsyncConnection, finished: Sequence[FinishedBatch]) -> None:
    if not finished:
        return
    ordered = sorted(finished, key=lambda batch: batch.id)
    for hook in list(_HOOKS):
        await hook(conn, ordered)
