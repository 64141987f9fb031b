"""The batch queue's transaction rules (``relay.batches.queue`` docstring): write transactions, the
clock, per-batch advisory locks, and the completion check that finishes batches and runs the finish
hooks (``relay.batches.hooks``) in the finishing transaction.

It also holds the expiry's statements (SPEC §14, §15; ``relay.batches.expiry`` runs them):
:func:`expire_due_batches` and :func:`expired_running`.

What it deliberately does not know. Which state change a transaction makes (queue, recovery and
expiry decide); what a finish hook writes; how an expired item's usage event is built.

Invariants. Every transaction that can finish a batch calls :func:`_complete_if_done` after
:func:`_lock_batches` for the same batches, so exactly one transaction sets ``completed_at`` and runs
the hooks for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import ColumnElement, Interval, exists, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.batches.held import Db
from relay.batches.hooks import NO_HOOKS, FinishedBatch, FinishHooks
from relay.batches.views import B, BatchRecord, I, in_state, record_from_row
from relay.domain.batches import AVAILABLE, CANCELLED, EXPIRED_PREFIX, ITEM_STATES, RUNNING, expired_error
from relay.store.tables import UTCDateTime
from relay.store.usage import insert_events
from relay.usage.event import UsageEvent

# Namespace (first key) of the per-batch advisory locks: the bytes "rbat", which fit a Postgres int4.
_LOCK_NAMESPACE: Final = int.from_bytes(b"rbat", "big")


@asynccontextmanager
async def _write(db: Db) -> AsyncIterator[AsyncConnection]:
    """A write transaction: ``BEGIN IMMEDIATE`` on SQLite (the write lock at BEGIN, so two processes
    never both read "available" and then both write); the default READ COMMITTED on Postgres. ``db``
    is the engine (a checkout), or on Postgres a connection a batch task holds
    (``relay.batches.held``): the transaction then runs on it."""
    if isinstance(db, AsyncConnection):
        async with db.begin():
            yield db
        return
    async with db.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
        yield conn


def _now(conn: AsyncConnection) -> ColumnElement[datetime]:
    if conn.dialect.name == "postgresql":
        return func.now(type_=UTCDateTime())  # the database's clock, the same for every replica
    return literal(datetime.now(UTC), UTCDateTime())


def _ago(conn: AsyncConnection, seconds: float) -> ColumnElement[datetime]:
    if conn.dialect.name == "postgresql":
        return func.now(type_=UTCDateTime()) - literal(timedelta(seconds=seconds), Interval())
    return literal(datetime.now(UTC) - timedelta(seconds=seconds), UTCDateTime())


def _check_events(events: Sequence[UsageEvent], keys: Sequence[tuple[str, int]]) -> None:
    """The events a callback built must be batch events for exactly these items, in this order."""
    got = [(event.batch_id, event.batch_idx) for event in events]
    if got != list(keys) or any(event.source != "batch" for event in events):
        raise ValueError(
            f"expected one batch usage event per item, in order, for {len(keys)} items; got {len(events)}"
        )


def _lock_key(batch_id: str) -> int:
    """A signed 32-bit key for ``batch_id`` (a collision only serialises two batches' finishers)."""
    return int.from_bytes(hashlib.blake2b(batch_id.encode(), digest_size=4).digest(), "big", signed=True)


async def _lock_batches(conn: AsyncConnection, batch_ids: Iterable[str]) -> None:
    """Serialise this transaction's completion check with every other finisher of these batches.

    Postgres only (SQLite's BEGIN IMMEDIATE already serialises every writer). Keys are taken in
    ascending order, so two transactions locking several batches cannot deadlock on each other.
    """
    if conn.dialect.name != "postgresql":
        return
    for key in sorted({_lock_key(batch_id) for batch_id in batch_ids}):
        await conn.execute(select(func.pg_advisory_xact_lock(_LOCK_NAMESPACE, key)))


def _item_in(batch_id: Any, state: str) -> ColumnElement[bool]:
    return exists().where(I.c.batch_id == batch_id, in_state(state))


async def _complete_if_done(
    conn: AsyncConnection, batch_ids: Iterable[str], hooks: FinishHooks
) -> list[FinishedBatch]:
    """Set ``completed_at`` on those batches that have nothing available or running any more, and run
    the finish hooks (``relay.batches.hooks``) for them in this transaction; returns them.

    Call after :func:`_lock_batches` for the same batches. Two EXISTS rather than one ``state IN (…)``:
    each is answered by its own partial index.
    """
    ids = sorted(set(batch_ids))
    if not ids:
        return []
    done = await conn.execute(
        update(B)
        .where(
            B.c.id.in_(ids),
            B.c.completed_at.is_(None),
            ~_item_in(B.c.id, AVAILABLE),
            ~_item_in(B.c.id, RUNNING),
        )
        .values(completed_at=_now(conn))
        .returning(
            B.c.id,
            B.c.api,
            B.c.project_id,
            B.c.status,
            B.c.expires_at,
            B.c.completed_at,
            B.c.cancel_requested_at,
            B.c.api_status,
            _expired_item_in(B.c.id).label("has_expired"),
        )
    )
    rows = sorted(done.all(), key=lambda row: row.id)
    if not rows:
        return []
    counts: dict[str, dict[str, int]] = {row.id: {} for row in rows}
    counted = await conn.execute(
        select(I.c.batch_id, I.c.state, func.count())
        .where(I.c.batch_id.in_(list(counts)))
        .group_by(I.c.batch_id, I.c.state)
    )
    for batch_id, state, count in counted:
        counts[batch_id][state] = int(count)
    finished = [
        FinishedBatch(
            id=row.id,
            api=row.api,
            project_id=row.project_id,
            counts={state: counts[row.id][state] for state in ITEM_STATES if state in counts[row.id]},
            cancelled=row.status == "cancelled" or row.cancel_requested_at is not None,
            expired=bool(row.has_expired) and row.status != "cancelled",
            api_status=row.api_status,
        )
        for row in rows
    ]
    await hooks.run(conn, finished)
    return finished


def _expired_item_in(batch_id: Any) -> ColumnElement[bool]:
    """The batch has an item its expiry cancelled (error ``expired: …``): what makes a batch expired,
    not when its last item ended (one that succeeds just after the deadline leaves it completed)."""
    return exists().where(I.c.batch_id == batch_id, I.c.error.startswith(EXPIRED_PREFIX, autoescape=True))


def is_expired(expires_at: datetime | None, at: datetime | None) -> bool:
    """Whether ``at`` is at or past a batch's deadline (a running batch's items then stop as expired)."""
    if expires_at is None or at is None:
        return False
    return _aware(at) >= _aware(expires_at)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# ---------------------------------------------------------------------------------------------- expiry

#: The usage events of a batch's items its expiry cancels: (batch, idxs ascending, error) → one per idx.
ExpiryEvents = Callable[[BatchRecord, list[int], str], list[UsageEvent]]


def _due(conn: AsyncConnection) -> Any:
    """Open batches past their ``expires_at`` that still have an ``available`` item, the earliest
    deadline first (``ix_batches_expiring``). A batch left with only running items (a dead replica's,
    until rescued) is not due again, so it cannot hold later deadlines back."""
    return (
        select(B)
        .where(
            B.c.completed_at.is_(None),
            B.c.expires_at.is_not(None),
            B.c.expires_at <= _now(conn),
            _item_in(B.c.id, AVAILABLE),
        )
        .order_by(B.c.expires_at, B.c.id)
    )


async def expire_due_batches(
    db: Db, limit: int, events_for: ExpiryEvents, hooks: FinishHooks = NO_HOOKS
) -> list[BatchRecord]:
    """Cancel every ``available`` item (reserved or not) of up to ``limit`` due batches (:func:`_due`)
    with ``expired: batch expired at <instant>`` and the usage events ``events_for`` builds, and finish
    those left with nothing running, in one transaction; returns the batches swept. Nothing due (the
    usual case) costs one read and no write transaction."""
    async with _connection(db) as conn:
        if (await conn.execute(_due(conn).limit(1))).first() is None:
            return []
    async with _write(db) as conn:
        now = _now(conn)
        rows = await conn.execute(_due(conn).limit(limit))
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
                events = events_for(record, idxs, error)
                _check_events(events, [(batch_id, idx) for idx in idxs])
                await insert_events(conn, [event.to_row() for event in events])
        await _complete_if_done(conn, ids, hooks)
    return [records[batch_id] for batch_id in ids]


async def expired_running(db: Db, instance_id: str, limit: int) -> list[BatchRecord]:
    """Open batches past their ``expires_at`` with an item running on ``instance_id`` (whichever
    replica's sweep cancelled their available items): that replica stops those items."""
    async with _connection(db) as conn:
        rows = await conn.execute(
            select(B)
            .where(
                B.c.completed_at.is_(None),
                B.c.expires_at.is_not(None),
                B.c.expires_at <= _now(conn),
                exists().where(I.c.batch_id == B.c.id, in_state(RUNNING), I.c.claimed_by == instance_id),
            )
            .order_by(B.c.expires_at, B.c.id)
            .limit(limit)
        )
        return [record_from_row(row._mapping) for row in rows]


@asynccontextmanager
async def _connection(db: Db) -> AsyncIterator[AsyncConnection]:
    if isinstance(db, AsyncConnection):
        yield db
        return
    async with db.connect() as conn:
        yield conn
