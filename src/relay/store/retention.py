"""Retention's SQL (SPEC §17 "Retention"): what a batch deletion and the usage sweep delete, in bounded
chunks, and the lock that lets one replica sweep at a time.

What it does. :func:`deletion_target` reads what deleting one batch needs (owner, payload store, the
façade's fields) and whether it is *finished*; :func:`delete_items` removes the lowest ``limit`` items
of a finished batch with their database-held bodies, one short transaction per call;
:func:`delete_leftover_chunks` the bodies no item row points at any more; :func:`delete_batch_row` the
row itself, last. :func:`finished_before` lists finished batches whose last item became final before a
cutoff. :func:`delete_usage_before` and :func:`delete_payloads_before` remove up to ``limit`` usage events
or captured payloads older than a cutoff. :func:`sweep_lock` is a session-level Postgres advisory lock
(``pg_try_advisory_lock`` on an autocommit connection of its own: no transaction stays open while the
sweep runs), so at most one replica sweeps at a time; SQLite is one process and needs none.

What it deliberately does not know. Which files a façade wrote for a batch (the caller passes the
façade's fields up to the façade), the payload directory (``relay.payloads``), clocks (callers pass
cutoffs), metrics and logs.

Invariants. A batch is *finished* when every item is final (``completed_at`` set) and, for an OpenAI
batch (SPEC §14), its output and error files are no longer being written (``batch_tables.FINALIZE_WAITING``
is false); nothing here deletes a row of a batch that is not finished: each delete repeats that condition.
Every statement is bounded (``limit`` rows, a primary-key or ``ts`` index range), and every write runs
in its own short transaction (``BEGIN IMMEDIATE`` on SQLite, like every batch write), so a claim waits
for at most one chunk. Items are deleted before their batch's row, so a deletion cut short leaves a
finished batch that the next sweep or ``DELETE`` finishes, never an item without its batch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import ColumnElement, and_, delete, func, literal, not_, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store import tables as t
from relay.store import usage_rollup
from relay.store.batch_tables import FINALIZE_API, FINALIZE_CLAIM_PREFIX, FINALIZE_WAITING_STATUS

B = t.batches
I = t.batch_items  # noqa: E741  (the item table, next to B)
P = t.payload_chunks
U = t.usage_events
# What ``usage_rollup`` needs of a deleted event to take it out.
ROLLED = (
    "ts",
    "source",
    "project_id",
    "team_id",
    "policy_id",
    "principal_id",
    "credential_id",
    "model",
    "host",
    "status",
    "error_kind",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_nanos",
)
CAPTURED = t.payloads
BODY_KINDS: Final = ("request", "response")  # a batch's own chunks (``file`` chunks are the Files API's)

# Key of the sweep's session-level advisory lock: "rret" / 1, apart from the batch finishers' "rbat".
_LOCK: Final = (int.from_bytes(b"rret", "big"), 1)


@dataclass(frozen=True, slots=True)
class DeletionTarget:
    id: str
    owner: str
    api: str
    payload_store: str
    api_data: Mapping[str, Any] | None  # the façade's own fields, handed to the façade untouched
    finished: bool
    created_at: datetime  # its idempotency row, if any, was written with this instant


def finished() -> ColumnElement[bool]:
    """Every item final, and no façade still writing the batch's files (``FINALIZE_WAITING``, spelt so
    that a null ``api_status`` cannot make the whole condition null)."""
    writing_files = or_(
        B.c.api_status == FINALIZE_WAITING_STATUS, B.c.api_status.startswith(FINALIZE_CLAIM_PREFIX)
    )
    return and_(
        B.c.completed_at.is_not(None),
        or_(B.c.api != FINALIZE_API, B.c.api_status.is_(None), not_(writing_files)),
    )


def _writer(engine: AsyncEngine) -> AsyncEngine:
    return engine.execution_options(sqlite_begin="IMMEDIATE")


async def deletion_target(engine: AsyncEngine, batch_id: str) -> DeletionTarget | None:
    query = select(
        B.c.id, B.c.owner, B.c.api, B.c.payload_store, B.c.api_data, finished().label("done"), B.c.created_at
    )
    async with engine.connect() as conn:
        row = (await conn.execute(query.where(B.c.id == batch_id))).first()
    if row is None:
        return None
    return DeletionTarget(
        row.id, row.owner, row.api, row.payload_store, row.api_data, bool(row.done), row.created_at
    )


async def finished_before(engine: AsyncEngine, cutoff: datetime, limit: int) -> list[str]:
    """Up to ``limit`` finished batches whose last item became final before ``cutoff``, oldest first."""
    query = (
        select(B.c.id)
        .where(finished(), B.c.completed_at < literal(cutoff, t.UTCDateTime()))
        .order_by(B.c.completed_at, B.c.id)
        .limit(limit)
    )
    async with engine.connect() as conn:
        return [str(batch_id) for batch_id in (await conn.scalars(query))]


def _batch_is_finished(batch_id: str) -> ColumnElement[bool]:
    return select(B.c.id).where(B.c.id == batch_id, finished()).exists()


async def delete_items(
    engine: AsyncEngine, batch_id: str, limit: int, *, after_idx: int = -1
) -> tuple[int, int]:
    """Delete the ``limit`` lowest items above ``after_idx`` of a finished batch and their request and
    response chunks, in one transaction; ``(how many items went, the last idx deleted)`` — ``(0,
    after_idx)`` when none is left or the batch is not finished. Pass the last idx back as
    ``after_idx``: each chunk is then an idx range starting past the ones deleted before, whose index
    entries (dead until vacuum) the next chunk would otherwise walk again, every time (deleting a
    million-item batch took ten minutes that way, most of it re-reading dead entries)."""
    after = I.c.idx > after_idx
    async with _writer(engine).begin() as conn:
        if not (await conn.execute(select(_batch_is_finished(batch_id)))).scalar():
            return 0, after_idx
        ahead = select(I.c.idx).where(I.c.batch_id == batch_id, after).order_by(I.c.idx)
        last = (await conn.execute(ahead.offset(limit - 1).limit(1))).scalar()
        if last is None:  # fewer than ``limit`` left: up to the batch's last item
            final = select(func.max(I.c.idx)).where(I.c.batch_id == batch_id, after)
            last = (await conn.execute(final)).scalar()
        if last is None:
            return 0, after_idx
        span = (after, I.c.idx <= last)
        gone = await conn.execute(delete(I).where(I.c.batch_id == batch_id, *span))
        await conn.execute(
            delete(P).where(
                P.c.owner_id == batch_id, P.c.kind.in_(BODY_KINDS), P.c.idx > after_idx, P.c.idx <= last
            )
        )
    return int(gone.rowcount or 0), int(last)


async def delete_leftover_chunks(engine: AsyncEngine, batch_id: str, limit: int) -> int:
    """Up to ``limit`` of a finished batch's chunks that outlived their items (none, normally)."""
    keys = (
        select(P.c.owner_id, P.c.kind, P.c.idx, P.c.seq)
        .where(P.c.owner_id == batch_id, P.c.kind.in_(BODY_KINDS), _batch_is_finished(batch_id))
        .limit(limit)
    )
    async with _writer(engine).begin() as conn:
        gone = await conn.execute(delete(P).where(tuple_(P.c.owner_id, P.c.kind, P.c.idx, P.c.seq).in_(keys)))
    return int(gone.rowcount or 0)


async def delete_batch_row(
    engine: AsyncEngine, batch_id: str, also: Callable[[AsyncConnection], Awaitable[None]] | None = None
) -> bool:
    """The batch's row, when it is finished (its items went first); whether it went. ``also`` runs
    in the same transaction when the row went (an admin deletion's audit entry, SPEC §21)."""
    async with _writer(engine).begin() as conn:
        await conn.execute(delete(I).where(I.c.batch_id == batch_id, _batch_is_finished(batch_id)))
        gone = await conn.execute(delete(B).where(B.c.id == batch_id, finished()))
        if also is not None and gone.rowcount:
            await also(conn)
    return bool(gone.rowcount)


async def delete_usage_before(engine: AsyncEngine, cutoff: datetime, limit: int) -> int:
    """Up to ``limit`` usage events older than ``cutoff`` (``ix_usage_events_ts_id``), one transaction,
    taken out of ``usage_rollup`` in that same transaction (the deleted rows come back by ``RETURNING``,
    summed into one aggregated decrement)."""
    old = select(U.c.id).where(U.c.ts < literal(cutoff, t.UTCDateTime())).order_by(U.c.ts).limit(limit)
    async with _writer(engine).begin() as conn:
        gone = await conn.execute(
            delete(U).where(U.c.id.in_(old.scalar_subquery())).returning(*(U.c[name] for name in ROLLED))
        )
        rows = list(gone)  # rows read by attribute, as events are (``usage_rollup.aggregate``)
        await usage_rollup.subtract(conn, rows)
    return len(rows)


async def delete_payloads_before(engine: AsyncEngine, cutoff: datetime, limit: int) -> int:
    """Up to ``limit`` captured payloads (SPEC §9) older than ``cutoff`` (``ix_payloads_ts``)."""
    old = (
        select(CAPTURED.c.request_id)
        .where(CAPTURED.c.ts < literal(cutoff, t.UTCDateTime()))
        .order_by(CAPTURED.c.ts)
        .limit(limit)
    )
    async with _writer(engine).begin() as conn:
        gone = await conn.execute(delete(CAPTURED).where(CAPTURED.c.request_id.in_(old.scalar_subquery())))
    return int(gone.rowcount or 0)


@asynccontextmanager
async def sweep_lock(engine: AsyncEngine) -> AsyncIterator[bool]:
    """Whether this process may sweep now: True while it holds the cluster-wide sweep lock (Postgres;
    another replica holding it → False, at once), always True on SQLite. The lock is a session lock on
    a connection of its own in autocommit mode, released on exit (or when that connection dies)."""
    if engine.dialect.name != "postgresql":
        yield True
        return
    async with engine.connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        got = bool((await conn.execute(select(func.pg_try_advisory_lock(*_LOCK)))).scalar())
        try:
            yield got
        finally:
            if got:
                await _unlock(conn)


async def _unlock(conn: AsyncConnection) -> None:
    try:
        await conn.execute(select(func.pg_advisory_unlock(*_LOCK)))
    except BaseException:
        await conn.invalidate()  # never back to the pool holding the lock
        raise
