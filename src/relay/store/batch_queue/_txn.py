"""The batch queue's transaction rules (``relay.store.batch_queue`` docstring): write transactions, the
clock, per-batch advisory locks, and the completion check that finishes batches and runs the finish
hooks (``relay.batches.hooks``) in the finishing transaction.

What it deliberately does not know. Which state change a transaction makes (the claims, finish,
liveness and expiry modules decide); what a finish hook writes; how an item's usage event is built.

Invariants. Every transaction that can finish a batch calls :func:`complete_if_done` after
:func:`lock_batches` for the same batches, so exactly one transaction sets ``completed_at`` and runs
the hooks for it.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from sqlalchemy import ColumnElement, Interval, exists, func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batch_record import FinishedBatch
from relay.domain.batches import AVAILABLE, EXPIRED_PREFIX, ITEM_STATES, RUNNING
from relay.store.batch_queue._rows import B, I, in_state
from relay.store.batches import item_counts
from relay.store.held import Db
from relay.store.tables import UTCDateTime
from relay.store.usage import EventRecord


class BatchEvent(EventRecord, Protocol):
    """A batch item's usage event (``relay.usage.event.UsageEvent``, which sits above the store): what
    the store checks of it, and the row it inserts in the transaction of the item's state."""

    @property
    def batch_id(self) -> str | None: ...
    @property
    def batch_idx(self) -> int | None: ...


class RunsFinishHooks(Protocol):
    """What runs the finish hooks of a finishing transaction (``relay.batches.hooks.FinishHooks``):
    the store calls it and never knows which hooks there are."""

    async def run(self, conn: AsyncConnection, finished: Sequence[FinishedBatch]) -> None: ...


class _NoHooks:
    async def run(self, conn: AsyncConnection, finished: Sequence[FinishedBatch]) -> None:
        return None


NO_HOOKS: Final[RunsFinishHooks] = _NoHooks()  # a store built without hooks runs none

# Namespace (first key) of the per-batch advisory locks: the bytes "rbat", which fit a Postgres int4.
_LOCK_NAMESPACE: Final = int.from_bytes(b"rbat", "big")


@asynccontextmanager
async def write_txn(db: Db) -> AsyncIterator[AsyncConnection]:
    """A write transaction: ``BEGIN IMMEDIATE`` on SQLite (the write lock at BEGIN, so two processes
    never both read "available" and then both write); the default READ COMMITTED on Postgres. ``db``
    is the engine (a checkout), or on Postgres a connection a batch task holds
    (``relay.store.held``): the transaction then runs on it. A connection already in a transaction is
    a turn of a SQLite write group (``relay.store.write_group``): the statements join the group's
    transaction, inside the turn's savepoint, and commit with it."""
    if isinstance(db, AsyncConnection):
        if db.in_transaction():
            yield db
            return
        async with db.begin():
            yield db
        return
    async with db.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
        yield conn


def db_now(conn: AsyncConnection) -> ColumnElement[datetime]:
    if conn.dialect.name == "postgresql":
        return func.now(type_=UTCDateTime())  # the database's clock, the same for every replica
    return literal(datetime.now(UTC), UTCDateTime())


def db_ago(conn: AsyncConnection, seconds: float) -> ColumnElement[datetime]:
    if conn.dialect.name == "postgresql":
        return func.now(type_=UTCDateTime()) - literal(timedelta(seconds=seconds), Interval())
    return literal(datetime.now(UTC) - timedelta(seconds=seconds), UTCDateTime())


def check_events(events: Sequence[BatchEvent], keys: Sequence[tuple[str, int]]) -> None:
    """The events a callback built must be batch events for exactly these items, in this order."""
    got = [(event.batch_id, event.batch_idx) for event in events]
    if got != list(keys) or any(event.source != "batch" for event in events):
        raise ValueError(
            f"expected one batch usage event per item, in order, for {len(keys)} items; got {len(events)}"
        )


def _lock_key(batch_id: str) -> int:
    """A signed 32-bit key for ``batch_id`` (a collision only serialises two batches' finishers)."""
    return int.from_bytes(hashlib.blake2b(batch_id.encode(), digest_size=4).digest(), "big", signed=True)


async def lock_batches(conn: AsyncConnection, batch_ids: Iterable[str]) -> None:
    """Serialise this transaction's completion check with every other finisher of these batches.

    Postgres only (SQLite's BEGIN IMMEDIATE already serialises every writer). Keys are taken in
    ascending order, so two transactions locking several batches cannot deadlock on each other.
    """
    if conn.dialect.name != "postgresql":
        return
    for key in sorted({_lock_key(batch_id) for batch_id in batch_ids}):
        await conn.execute(select(func.pg_advisory_xact_lock(_LOCK_NAMESPACE, key)))


_PG_LOCK: Final = "SELECT pg_advisory_xact_lock($1, $2)"


async def lock_batches_on_driver(raw: Any, batch_ids: Iterable[str]) -> None:
    """:func:`lock_batches` on Postgres with its statement on the driver (``relay.store.driver``):
    the same locks, in the same ascending order."""
    for key in sorted({_lock_key(batch_id) for batch_id in batch_ids}):
        await raw.execute(_PG_LOCK, _LOCK_NAMESPACE, key)


def item_in(batch_id: Any, state: str) -> ColumnElement[bool]:
    return exists().where(I.c.batch_id == batch_id, in_state(state))


async def complete_if_done(
    conn: AsyncConnection, batch_ids: Iterable[str], hooks: RunsFinishHooks
) -> list[FinishedBatch]:
    """Set ``completed_at`` on those batches that have nothing available or running any more, and run
    the finish hooks (``relay.batches.hooks``) for them in this transaction; returns them.

    Call after :func:`lock_batches` for the same batches. Two EXISTS rather than one ``state IN (…)``:
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
            ~item_in(B.c.id, AVAILABLE),
            ~item_in(B.c.id, RUNNING),
        )
        .values(completed_at=db_now(conn))
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
    return await _finished(conn, [row._mapping for row in done], hooks)


#: ``startswith(EXPIRED_PREFIX, autoescape=True)``'s pattern, for ``LIKE … ESCAPE '/'``.
_EXPIRED_LIKE: Final = EXPIRED_PREFIX.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"


# Postgres: :func:`complete_if_done`'s statement as text for the driver, the same conditions and clock.
_PG_COMPLETE: Final = (
    "UPDATE batches SET completed_at = now()"
    " WHERE batches.id = ANY($1::varchar[]) AND batches.completed_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM batch_items"
    " WHERE batch_items.batch_id = batches.id AND batch_items.state = 'available')"
    " AND NOT EXISTS (SELECT 1 FROM batch_items"
    " WHERE batch_items.batch_id = batches.id AND batch_items.state = 'running')"
    " RETURNING batches.id, batches.api, batches.project_id, batches.status,"
    " batches.cancel_requested_at, batches.api_status,"
    " EXISTS (SELECT 1 FROM batch_items WHERE batch_items.batch_id = batches.id"
    " AND batch_items.error LIKE $2::varchar ESCAPE '/') AS has_expired"
)


# Postgres: the tally's counters (``FinalTally.rows``: batch id order, one row per batch) added in the
# completion check of those same batches (``$1``), as a data-modifying CTE: one round trip for both.
# Both come after the batches' advisory locks, so the counter rows are still only written by their
# holders; the check reads ``batch_items``, not the counters, and the counts read after it see the
# CTE's rows.
_PG_COUNT_AND_COMPLETE: Final = (
    "WITH counted AS (INSERT INTO batch_counters (batch_id, completed, discarded, cancelled)"
    " SELECT * FROM unnest($1::varchar[], $3::integer[], $4::integer[], $5::integer[])"
    " ON CONFLICT (batch_id) DO UPDATE SET completed = batch_counters.completed + excluded.completed,"
    " discarded = batch_counters.discarded + excluded.discarded,"
    " cancelled = batch_counters.cancelled + excluded.cancelled) "
) + _PG_COMPLETE


async def count_and_complete_on_driver(
    conn: AsyncConnection, raw: Any, counts: Sequence[tuple[str, int, int, int]], hooks: RunsFinishHooks
) -> list[FinishedBatch]:
    """Add ``counts`` (``FinalTally.rows``) to their batches' counters and run :func:`complete_if_done`
    for those batches, in one statement on the driver (``relay.store.driver``); the counts and the
    finish hooks of a batch it finishes run on ``conn``, in the same transaction. Postgres only."""
    if not counts:
        return []
    batch_ids, completed, discarded, cancelled = (list(column) for column in zip(*counts, strict=True))
    rows = await raw.fetch(_PG_COUNT_AND_COMPLETE, batch_ids, _EXPIRED_LIKE, completed, discarded, cancelled)
    return await _finished(conn, rows, hooks)


async def _finished(
    conn: AsyncConnection, done: Sequence[Any], hooks: RunsFinishHooks
) -> list[FinishedBatch]:
    """The batches a completion check finished (rows of its RETURNING, as mappings), with their counts;
    their finish hooks run in this transaction."""
    rows = sorted(done, key=lambda row: row["id"])
    if not rows:
        return []
    counts = await item_counts(conn, [row["id"] for row in rows])  # one GROUP BY, in this transaction
    finished = [
        FinishedBatch(
            id=row["id"],
            api=row["api"],
            project_id=row["project_id"],
            counts={state: counts[row["id"]][state] for state in ITEM_STATES if state in counts[row["id"]]},
            cancelled=row["status"] == "cancelled" or row["cancel_requested_at"] is not None,
            expired=bool(row["has_expired"]) and row["status"] != "cancelled",
            api_status=row["api_status"],
        )
        for row in rows
    ]
    await hooks.run(conn, finished)
    return finished


def _expired_item_in(batch_id: Any) -> ColumnElement[bool]:
    """The batch has an item its expiry cancelled (error ``expired: …``): what makes a batch expired,
    not when its last item ended (one that succeeds just after the deadline leaves it completed)."""
    return exists().where(I.c.batch_id == batch_id, I.c.error.startswith(EXPIRED_PREFIX, autoescape=True))


@asynccontextmanager
async def connection(db: Db) -> AsyncIterator[AsyncConnection]:
    if isinstance(db, AsyncConnection):
        yield db
        return
    async with db.connect() as conn:
        yield conn
