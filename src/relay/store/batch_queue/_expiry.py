"""Batch expiry's statements (SPEC §14, §15; ``relay.batches.expiry`` runs them on a timer):
:func:`expire_due_batches` cancels the available items of batches past their ``expires_at`` and
finishes those with nothing running; :func:`expired_running` finds the expired batches whose items
still run on one replica, which stops them.

Invariants. The transaction rules of ``relay.store.batch_queue`` (advisory lock first, like a cancel:
only available items change); an item is cancelled once, with its event in the same transaction.
Several replicas may sweep at once: the second finds nothing left to cancel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batch_record import BatchRecord
from relay.domain.batches import AVAILABLE, CANCELLED, RUNNING, expired_error
from relay.store.batch_queue._rows import B, I, in_state, record_from_row
from relay.store.batch_queue._tally import FinalTally
from relay.store.batch_queue._txn import (
    NO_HOOKS,
    BatchEvent,
    RunsFinishHooks,
    check_events,
    complete_if_done,
    connection,
    db_now,
    item_in,
    lock_batches,
    write_txn,
)
from relay.store.held import Db
from relay.store.usage import insert_events

#: The usage events of a batch's items its expiry cancels: (batch, idxs ascending, error) → one per idx.
ExpiryEvents = Callable[[BatchRecord, list[int], str], Sequence[BatchEvent]]


def _due(conn: AsyncConnection) -> Any:
    """Open batches past their ``expires_at`` that still have an ``available`` item, the earliest
    deadline first (``ix_batches_expiring``). A batch left with only running items (a dead replica's,
    until rescued) is not due again, so it cannot hold later deadlines back."""
    return (
        select(B)
        .where(
            B.c.completed_at.is_(None),
            B.c.expires_at.is_not(None),
            B.c.expires_at <= db_now(conn),
            B.c.offload_state.is_(None),  # a provider runs it: the offload poller forwards its expiry
            item_in(B.c.id, AVAILABLE),
        )
        .order_by(B.c.expires_at, B.c.id)
    )


async def expire_due_batches(
    db: Db, limit: int, events_for: ExpiryEvents, hooks: RunsFinishHooks = NO_HOOKS
) -> list[BatchRecord]:
    """Cancel every ``available`` item (reserved or not) of up to ``limit`` due batches (:func:`_due`)
    with ``expired: batch expired at <instant>`` and the usage events ``events_for`` builds, and finish
    those left with nothing running, in one transaction; returns the batches swept. Nothing due (the
    usual case) costs one read and no write transaction."""
    async with connection(db) as conn:
        if (await conn.execute(_due(conn).limit(1))).first() is None:
            return []
    async with write_txn(db) as conn:
        now = db_now(conn)
        rows = await conn.execute(_due(conn).limit(limit))
        records = {row.id: record_from_row(row._mapping) for row in rows}
        if not records:
            return []
        ids = sorted(records)
        await lock_batches(conn, ids)  # like a cancel: only available items change
        tally = FinalTally()
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
            tally.add(batch_id, CANCELLED, len(idxs))
            if idxs:
                events = events_for(record, idxs, error)
                check_events(events, [(batch_id, idx) for idx in idxs])
                await insert_events(conn, events)
        await tally.write(conn)
        await complete_if_done(conn, ids, hooks)
    return [records[batch_id] for batch_id in ids]


async def expired_running(db: Db, instance_id: str, limit: int) -> list[BatchRecord]:
    """Open batches past their ``expires_at`` with an item running on ``instance_id`` (whichever
    replica's sweep cancelled their available items): that replica stops those items."""
    async with connection(db) as conn:
        rows = await conn.execute(
            select(B)
            .where(
                B.c.completed_at.is_(None),
                B.c.expires_at.is_not(None),
                B.c.expires_at <= db_now(conn),
                exists().where(I.c.batch_id == B.c.id, in_state(RUNNING), I.c.claimed_by == instance_id),
            )
            .order_by(B.c.expires_at, B.c.id)
            .limit(limit)
        )
        return [record_from_row(row._mapping) for row in rows]
