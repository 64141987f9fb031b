"""Batch expiry (SPEC §14, §15): at ``expires_at``, a batch's items not yet final are cancelled with an
error starting ``expired: `` and the batch finishes (its finish hooks run, flagged ``expired``).

What it does. :func:`expire_due` is one transaction over the batches past their ``expires_at`` and
not finished (``ix_batches_expiring``): every ``available`` item (reserved or not) becomes
``cancelled`` with ``expired: batch expired at <instant>`` and one usage event each, and each batch
finishes unless an item still runs. :class:`ExpirySweeper` runs it on every replica every
``RELAY_BATCH_EXPIRY_SWEEP_S`` (default 30 s), whatever ``RELAY_BATCH_WORKERS``, and asks this
replica's worker pool to stop its running items of the expired batches (they become ``cancelled``
with the same error, like a cancel's, SPEC §10.5); an item running on another replica is stopped by
that replica's sweep, or finishes first. A batch whose last running item ends after its
``expires_at`` finishes then, still flagged expired (``queue.is_expired``).

What it deliberately does not know. Which API set ``expires_at`` (§10 batches have none, so never
expire) and what a façade shows for an expired batch.

Invariants. The transaction rules of ``relay.batches.queue`` (advisory lock first, like a cancel:
only available items change); an item is cancelled once, with its event in the same transaction.
Several replicas may sweep at once: the second finds nothing left to cancel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from sqlalchemy import Select, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.queue import _check_events, _complete_if_done, _lock_batches, _now, _write
from relay.batches.runner import item_event
from relay.batches.views import B, BatchRecord, I, in_state, record_from_row
from relay.domain.batches import AVAILABLE, CANCELLED, RUNNING, expired_error
from relay.store.usage import insert_events

log = logging.getLogger("relay.batches")
SWEEP_BATCHES: Final = 100  # batches expired per transaction


async def expire_due(engine: AsyncEngine) -> list[BatchRecord]:
    """Cancel the open items of up to :data:`SWEEP_BATCHES` batches past their ``expires_at`` (with
    their usage events) and finish those with nothing running; returns the batches swept (some may
    still have running items). Nothing due (the usual case) costs one read, no write transaction."""
    async with engine.connect() as conn:
        if (await conn.execute(_due(conn).limit(1))).first() is None:
            return []
    async with _write(engine) as conn:
        now = _now(conn)
        rows = await conn.execute(_due(conn).limit(SWEEP_BATCHES))
        records = {row.id: record_from_row(row._mapping) for row in rows}
        if not records:
            return []
        ids = sorted(records)
        await _lock_batches(conn, ids)  # like a cancel: only available items change
        for batch_id in ids:
            record = records[batch_id]
            assert record.expires_at is not None
            error = expired_error(record.expires_at)
            cancelled = await conn.execute(
                update(I)
                .where(I.c.batch_id == batch_id, in_state(AVAILABLE))
                .values(state=CANCELLED, finished_at=now, error=error, claimed_by=None, claimed_at=None)
                .returning(I.c.idx)
            )
            idxs = sorted(cancelled.scalars())
            if idxs:
                events = [item_event(record, idx, error_kind="expired", error_message=error) for idx in idxs]
                _check_events(events, [(batch_id, idx) for idx in idxs])
                await insert_events(conn, [event.to_row() for event in events])
        await _complete_if_done(conn, ids)
    return [records[batch_id] for batch_id in ids]


def _due(conn: AsyncConnection) -> Select[Any]:
    """Open batches past their ``expires_at``, the earliest deadline first (``ix_batches_expiring``)."""
    return (
        select(B)
        .where(B.c.completed_at.is_(None), B.c.expires_at.is_not(None), B.c.expires_at <= _now(conn))
        .order_by(B.c.expires_at)
    )


async def running_batches(engine: AsyncEngine, batch_ids: list[str]) -> set[str]:
    """Which of these batches still have a running item (one query, the running index)."""
    if not batch_ids:
        return set()
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(I.c.batch_id).where(I.c.batch_id.in_(batch_ids), in_state(RUNNING)).distinct()
        )
        return {row.batch_id for row in rows}


class ExpirySweeper:
    """Every ``interval_s``: :func:`expire_due`, then ``stop_running(batch_id, error)`` for the swept
    batches that still run items (this replica's worker pool stops its own)."""

    def __init__(
        self,
        engine: AsyncEngine,
        interval_s: float,
        stop_running: Callable[[str, str], Awaitable[object]] | None = None,
    ) -> None:
        self._engine = engine
        self._interval_s = interval_s
        self._stop_running = stop_running
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="batch-expiry")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def sweep(self) -> list[BatchRecord]:
        swept = await expire_due(self._engine)
        if swept and self._stop_running is not None:
            for batch_id in await running_batches(self._engine, [r.id for r in swept]):
                record = next(r for r in swept if r.id == batch_id)
                assert record.expires_at is not None
                await self._stop_running(batch_id, expired_error(record.expires_at))
        if swept:
            log.info("expired %d batches", len(swept))
        return swept

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                for _ in range(10):  # more may be due: a few passes, then the next interval
                    if len(await self.sweep()) < SWEEP_BATCHES:
                        break
            except Exception as exc:
                log.warning("batch expiry sweep failed (%s); retrying", type(exc).__name__)
