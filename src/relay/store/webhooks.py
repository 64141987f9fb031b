"""SQL for the webhook outbox (SPEC §10.10): write events, claim due ones, record attempts, fail the
expired, list them.

What it does. :func:`matching_webhooks` and :func:`insert_events` run inside the caller's transaction
(the one that finishes a batch), so the events commit or roll back with the finish. :func:`claim_due`
hands a replica up to ``limit`` due events in one short transaction: Postgres locks them with
``FOR UPDATE SKIP LOCKED`` (concurrent replicas take different events, and never wait), SQLite runs it
as ``BEGIN IMMEDIATE`` (one writer at a time across processes). A claim moves the event's
``next_attempt_at`` one lease ahead and stamps a fresh ``claim_token``; :func:`finish_attempt` records
the attempt and the event's new state only while that token is still the event's, so a replica that
died mid-attempt costs one lease, and a late finisher whose lease ran out records nothing twice.

What it deliberately does not know. Signing, HTTP, the retry schedule and ids (the service passes the
delay and the ids it minted); it stores what it is given.

Invariants. Every time this module compares or computes is the database's ``now()`` on Postgres (one
clock for every replica); on SQLite (one host) the process clock. The state literal is written into
the SQL, so the claim is served by the partial index ``ix_webhook_events_due``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Interval,
    and_,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store.columns import UTCDateTime
from relay.store.webhook_tables import webhook_deliveries, webhook_events, webhooks

E, D, WH = webhook_events, webhook_deliveries, webhooks
_PENDING: ColumnElement[str] = literal_column("'pending'")


@dataclass(frozen=True, slots=True)
class ClaimedEvent:
    """A due event this replica now attempts, with what the attempt needs from its webhook."""

    id: str
    webhook_id: str
    type: str
    body: str
    attempts: int  # recorded before this attempt
    created_at: datetime
    claim_token: str
    url: str
    secret_encrypted: bytes


@asynccontextmanager
async def _write(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    async with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
        yield conn


def _now(conn: AsyncConnection) -> ColumnElement[datetime]:
    if conn.dialect.name == "postgresql":
        return func.now(type_=UTCDateTime())
    return literal(datetime.now(UTC), UTCDateTime())


def _later(conn: AsyncConnection, seconds: float) -> ColumnElement[datetime]:
    if conn.dialect.name == "postgresql":
        return func.now(type_=UTCDateTime()) + literal(timedelta(seconds=seconds), Interval())
    return literal(datetime.now(UTC) + timedelta(seconds=seconds), UTCDateTime())


# ---------------------------------------------------------------------------------------------- outbox


async def matching_webhooks(conn: AsyncConnection, project_id: str) -> list[dict[str, Any]]:
    """Enabled webhooks of ``project_id`` or of every project: ``{"id", "events"}`` each."""
    rows = await conn.execute(
        select(WH.c.id, WH.c.events)
        .where(WH.c.enabled.is_(True), or_(WH.c.project_id.is_(None), WH.c.project_id == project_id))
        .order_by(WH.c.id)
    )
    return [{"id": row.id, "events": list(row.events or [])} for row in rows]


async def insert_events(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> int:
    """Write pending events (``id``, ``webhook_id``, ``type``, ``batch_id``, ``body``), due now; a
    second event for the same webhook and batch is dropped by the unique index. Returns how many."""
    if not rows:
        return 0
    upsert = pg_insert(E) if conn.dialect.name == "postgresql" else sqlite_insert(E)
    now = _now(conn)
    written = 0
    for row in rows:
        statement = upsert.values(
            **row, state="pending", attempts=0, created_at=now, next_attempt_at=now
        ).on_conflict_do_nothing(index_elements=[E.c.webhook_id, E.c.batch_id])
        written += (await conn.execute(statement)).rowcount or 0
    return written


async def requeue_event(conn: AsyncConnection, webhook_id: str, event_id: str) -> tuple[str, str | None]:
    """Put one of ``webhook_id``'s final events back in the outbox, due now (a redelivery): its body,
    id and type stay as they were, so the receiver sees the same ``webhook-id``; its ``created_at``
    restarts, so the redelivery gets the whole retry window. Returns (``requeued``, its type),
    (``pending``, its type) when it still is pending (nothing changed), or (``missing``, None)."""
    found = (
        await conn.execute(select(E.c.type).where(E.c.id == event_id, E.c.webhook_id == webhook_id))
    ).first()
    if found is None:
        return "missing", None
    changed = await conn.execute(
        update(E)
        .where(E.c.id == event_id, E.c.state != _PENDING)
        .values(
            state="pending",
            next_attempt_at=_now(conn),
            finished_at=None,
            created_at=_now(conn),
            claimed_by=None,
            claim_token=None,
        )
    )
    return ("requeued" if (changed.rowcount or 0) == 1 else "pending"), found.type


def write(engine: AsyncEngine) -> Any:
    """A write transaction (``BEGIN IMMEDIATE`` on SQLite), for a service that writes the outbox
    together with its audit entry."""
    return _write(engine)


# ---------------------------------------------------------------------------------------------- delivery


async def claim_due(
    engine: AsyncEngine, instance_id: str, claim_token: str, *, limit: int, lease_s: float
) -> list[ClaimedEvent]:
    """Up to ``limit`` due pending events of enabled webhooks, oldest due first, now claimed by
    ``instance_id`` under ``claim_token`` until ``lease_s`` from now (committed when this returns)."""
    if limit < 1:
        return []
    # A plain read first: most polls find nothing due, and then take no write lock (SQLite's
    # BEGIN IMMEDIATE would otherwise queue behind, and hold up, the batch and usage writers).
    async with engine.connect() as conn:
        anything = await conn.execute(
            select(E.c.id).where(E.c.state == _PENDING, E.c.next_attempt_at <= _now(conn)).limit(1)
        )
        if anything.first() is None:
            return []
    async with _write(engine) as conn:
        now = _now(conn)
        due = await conn.execute(
            select(E.c.id)
            .join(WH, WH.c.id == E.c.webhook_id)
            .where(E.c.state == _PENDING, E.c.next_attempt_at <= now, WH.c.enabled.is_(True))
            .order_by(E.c.next_attempt_at, E.c.id)
            .limit(limit)
            .with_for_update(of=E, skip_locked=True)
        )
        ids = list(due.scalars())
        if not ids:
            return []
        await conn.execute(
            update(E)
            .where(E.c.id.in_(ids))
            .values(claimed_by=instance_id, claim_token=claim_token, next_attempt_at=_later(conn, lease_s))
        )
        rows = await conn.execute(
            select(
                E.c.id,
                E.c.webhook_id,
                E.c.type,
                E.c.body,
                E.c.attempts,
                E.c.created_at,
                WH.c.url,
                WH.c.secret_encrypted,
            )
            .join(WH, WH.c.id == E.c.webhook_id)
            .where(E.c.id.in_(ids))
            .order_by(E.c.next_attempt_at, E.c.id)
        )
        return [
            ClaimedEvent(
                id=r.id,
                webhook_id=r.webhook_id,
                type=r.type,
                body=r.body,
                attempts=r.attempts,
                created_at=r.created_at,
                claim_token=claim_token,
                url=r.url,
                secret_encrypted=r.secret_encrypted,
            )
            for r in rows
        ]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt's outcome as the deliverer decided it."""

    delivery_id: str
    status_code: int | None
    latency_ms: int
    error: str | None
    state: str  # the event's state after it: pending (retry later), delivered or failed
    retry_in_s: float | None  # pending only: seconds until the next attempt


async def finish_attempt(engine: AsyncEngine, event: ClaimedEvent, attempt: Attempt) -> bool:
    """Record ``attempt`` (one ``webhook_deliveries`` row) and the event's new state in one transaction,
    only if ``event``'s claim is still the event's (True); False when its lease ran out and another
    claim took it, or it was deleted with its webhook: then nothing is written."""
    if (attempt.state == "pending") != (attempt.retry_in_s is not None):
        raise ValueError("a pending event needs retry_in_s, a final one none")
    async with _write(engine) as conn:
        final = attempt.state != "pending"
        next_at = None if attempt.retry_in_s is None else _later(conn, attempt.retry_in_s)
        changed = await conn.execute(
            update(E)
            .where(E.c.id == event.id, E.c.claim_token == event.claim_token, E.c.state == _PENDING)
            .values(
                state=attempt.state,
                attempts=E.c.attempts + 1,
                next_attempt_at=next_at,
                finished_at=_now(conn) if final else None,
                claimed_by=None,
                claim_token=None,
            )
        )
        if (changed.rowcount or 0) != 1:
            return False
        await conn.execute(
            insert(D).values(
                id=attempt.delivery_id,
                event_id=event.id,
                webhook_id=event.webhook_id,
                attempt=event.attempts + 1,
                status_code=attempt.status_code,
                latency_ms=attempt.latency_ms,
                error=attempt.error,
                created_at=_now(conn),
                next_attempt_at=next_at,
            )
        )
    return True


async def fail_expired(engine: AsyncEngine, older_than_s: float) -> int:
    """Mark ``failed`` every pending event created more than ``older_than_s`` ago that no claim holds
    now (its ``next_attempt_at`` has passed), whatever its webhook's ``enabled`` says: a disabled
    webhook's events are never claimed, and would otherwise stay pending for ever. No attempt is
    recorded (none was made). Returns how many were failed."""

    def expired(conn: AsyncConnection) -> ColumnElement[bool]:
        return and_(
            E.c.state == _PENDING,
            E.c.next_attempt_at <= _now(conn),
            E.c.created_at <= _later(conn, -older_than_s),
        )

    async with engine.connect() as conn:  # a plain read first, as in claim_due: usually nothing
        if (await conn.execute(select(E.c.id).where(expired(conn)).limit(1))).first() is None:
            return 0
    async with _write(engine) as conn:
        changed = await conn.execute(
            update(E)
            .where(expired(conn))
            .values(
                state="failed",
                next_attempt_at=None,
                finished_at=_now(conn),
                claimed_by=None,
                claim_token=None,
            )
        )
        return changed.rowcount or 0


# ---------------------------------------------------------------------------------------------- reads


async def recent_deliveries(engine: AsyncEngine, webhook_id: str, limit: int) -> list[dict[str, Any]]:
    """The webhook's last ``limit`` attempts, most recent first, each with its event's type."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(
                D.c.id,
                D.c.event_id,
                E.c.type,
                D.c.attempt,
                D.c.status_code,
                D.c.latency_ms,
                D.c.error,
                D.c.created_at,
                D.c.next_attempt_at,
            )
            .join(E, and_(E.c.id == D.c.event_id))
            .where(D.c.webhook_id == webhook_id)
            .order_by(D.c.created_at.desc(), D.c.attempt.desc(), D.c.id.desc())
            .limit(limit)
        )
        return [dict(row._mapping) for row in rows]


async def pending_summary(engine: AsyncEngine) -> tuple[int, datetime | None]:
    """(pending events, the oldest pending event's ``created_at``) over every *enabled* webhook: a
    disabled webhook's events wait without being attempted, and are left out (until they expire)."""
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(func.count(), func.min(E.c.created_at))
                .select_from(E.join(WH, WH.c.id == E.c.webhook_id))
                .where(E.c.state == _PENDING, WH.c.enabled.is_(True))
            )
        ).one()
    oldest = row[1]
    if isinstance(oldest, str):  # SQLite's aggregate loses the column type
        oldest = datetime.fromisoformat(oldest)
    if oldest is not None and oldest.tzinfo is None:
        oldest = oldest.replace(tzinfo=UTC)
    return int(row[0]), oldest
