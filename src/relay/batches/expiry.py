"""Batch expiry (SPEC §14, §15): at ``expires_at``, a batch's items not yet final are cancelled with an
error starting ``expired: `` and the batch finishes (its finish hooks run, flagged ``expired``).

What it does. :func:`expire_due` is one transaction over the batches past their ``expires_at``, not
finished and with an ``available`` item (``ix_batches_expiring``; the statements are in
``relay.store.batch_queue``): every ``available`` item (reserved or not) becomes ``cancelled`` with
``expired: batch expired at <instant>`` and one usage event each, and each batch finishes unless an
item still runs. A batch left with only running items is not due again (so a dead replica's items,
until rescued, cannot hold later deadlines back). :class:`ExpirySweeper` runs it on every replica every
``RELAY_BATCH_EXPIRY_SWEEP_S`` (default 30 s), whatever ``RELAY_BATCH_WORKERS``, and asks this
replica's worker pool to stop its running items of expired batches (they become ``cancelled``
with the same error, like a cancel's, SPEC §10.5), whichever replica's sweep cancelled their
available items; an item running on another replica is stopped by that replica's sweep, or finishes
first. A batch whose last running item ends after its
``expires_at`` finishes then, flagged expired when the expiry cancelled one of its items.

What it deliberately does not know. SQL (the batch store runs it: ``BatchStore.expire_due_batches``).
Which API set ``expires_at`` (§10 batches have none, so never expire) and what a façade shows for an
expired batch.

Invariants. The transaction rules of ``relay.store.batch_queue`` (advisory lock first, like a cancel:
only available items change); an item is cancelled once, with its event in the same transaction.
Several replicas may sweep at once: the second finds nothing left to cancel.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from relay.background import Loop
from relay.domain.batch_record import BatchRecord
from relay.domain.batches import expired_error
from relay.store.batch_queue import BatchStore
from relay.usage.event import UsageEvent, item_event

log = logging.getLogger("relay.batches")
SWEEP_BATCHES: Final = 100  # batches expired per transaction


def _expiry_events(record: BatchRecord, idxs: list[int], error: str) -> list[UsageEvent]:
    return [item_event(record, idx, error_kind="expired", error_message=error) for idx in idxs]


async def expire_due(store: BatchStore) -> list[BatchRecord]:
    """Cancel the available items of up to :data:`SWEEP_BATCHES` due batches (with their usage
    events) and finish those with nothing running; returns the batches swept (some may still have
    running items)."""
    return await store.expire_due_batches(SWEEP_BATCHES, _expiry_events)


class ExpirySweeper:
    """Every ``interval_s``: :func:`expire_due`, then ``stop_running(batch_id, error)`` for the expired
    batches with an item running on ``instance_id`` (this replica's worker pool stops its own), then
    ``housekeeping()`` (``relay.boot`` passes the idempotency rows' purge; bounded work per pass)."""

    def __init__(
        self,
        store: BatchStore,
        interval_s: float,
        stop_running: Callable[[str, str], Awaitable[object]] | None = None,
        *,
        instance_id: str | None = None,
        housekeeping: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        if stop_running is not None and instance_id is None:
            raise ValueError("stopping running items needs this replica's instance id")
        self._store = store  # its finish hooks run when a sweep finishes a batch
        self._stop_running = stop_running
        self._instance_id = instance_id
        self._loops = [Loop("batch-expiry", self._sweep_due, every_s=interval_s, wait_first=True)]
        if housekeeping is not None:
            self._loops.append(Loop("batch-housekeeping", housekeeping, every_s=interval_s, wait_first=True))

    async def start(self) -> None:
        for loop in self._loops:
            await loop.start()

    async def stop(self) -> None:
        for loop in self._loops:
            await loop.stop()

    async def sweep(self) -> list[BatchRecord]:
        swept = await expire_due(self._store)
        if self._stop_running is not None and self._instance_id is not None:
            for record in await self._store.expired_running(self._instance_id, SWEEP_BATCHES):
                assert record.expires_at is not None
                await self._stop_running(record.id, expired_error(record.expires_at))
        if swept:
            log.info("expired %d batches", len(swept))
        return swept

    async def _sweep_due(self) -> None:
        for _ in range(10):  # more may be due: a few passes, then the next interval
            if len(await self.sweep()) < SWEEP_BATCHES:
                break
