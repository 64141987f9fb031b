"""Claims and starts of batch items (SPEC §10.2, §10.6): the two statements of the hot batch loop.

:func:`claim` reserves up to ``limit`` available items of ONE batch for a replica, in the queue's fair
order (``relay.store.batch_queue`` docstring: projects take turns, then their batches, then idxs),
stamps the batch's and its project's turn, and refreshes its heartbeat in the same transaction (on
Postgres one statement, ``_PG_CLAIM``); reserved items stay ``available``. :func:`start` makes reserved
items ``running`` with one conditional statement per group (``relay.batches.starter`` groups the
calls). Both are built once per dialect and run on a connection the calling task holds
(``relay.store.held``) where it keeps one. On Postgres both run as text on the asyncpg driver itself
(``relay.store.driver``): SQLAlchemy's per-execution work cost more of Relay's CPU than the statements.
The SQLAlchemy forms of the claim are SQLite's; the heartbeat's serves :func:`upsert_worker` on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Integer,
    bindparam,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batch_record import BatchRecord
from relay.domain.batches import AVAILABLE
from relay.store.batch_queue._rows import RECORD_FIELDS, B, I, T, W, in_state, record_from_row
from relay.store.batch_queue._txn import connection, write_txn
from relay.store.columns import utc_bind_step
from relay.store.driver import driver_connection, pg_driver
from relay.store.held import Db
from relay.store.tables import ID, UTCDateTime


@dataclass(frozen=True, slots=True)
class ClaimedItem:
    """An item this replica now runs. Items of one claim share one :class:`BatchRecord` instance."""

    batch: BatchRecord
    idx: int

    @property
    def batch_id(self) -> str:
        return self.batch.id


def _has_unreserved(batch_id: Any) -> ColumnElement[bool]:
    """The batch has an available item no replica has reserved: its lowest such idx is not NULL.

    Why not ``EXISTS``: Postgres turns an ``EXISTS`` into a semi-join and, with a big batch, plans it
    as a scan of every waiting item (≈ 1.4 s per claim at 1 000 000 items). A scalar subquery cannot be
    flattened: it is one probe of ``ix_batch_items_unreserved`` per open batch, the first entry of the
    batch's range, whatever the number of waiting items (``bench/claim_at_scale.py``)."""
    first = (
        select(I.c.idx)
        .where(I.c.batch_id == batch_id, in_state(AVAILABLE), I.c.claimed_by.is_(None))
        .order_by(I.c.idx)
        .limit(1)
        .scalar_subquery()
    )
    return first.is_not(None)


def _project_turn(project_id: Any) -> Any:
    """When a claim last served the project (NULL: never), for the claim's order (SPEC §17)."""
    return select(T.c.last_claimed_at).where(T.c.project_id == project_id).scalar_subquery()


@dataclass(frozen=True, slots=True)
class _ClaimSQL:
    """SQLite's claim statements, built once: a claim runs many times a second under load, and
    building and cache-keying fresh statement objects each time cost more than executing them."""

    pick: Any
    take: Any
    stamp: Any
    turn: Any


_SQLITE_CLAIM: list[_ClaimSQL] = []
_HEARTBEATS: dict[str, Any] = {}


def _sqlite_claim_sql() -> _ClaimSQL:
    if _SQLITE_CLAIM:
        return _SQLITE_CLAIM[0]
    now = bindparam("c_now", type_=UTCDateTime())  # the process clock, bound per call
    batch_id = bindparam("c_batch", type_=ID)
    pick = (
        select(B)
        .where(
            B.c.completed_at.is_(None),
            B.c.status == literal_column("'queued'"),
            B.c.offload_state.is_(None),  # a provider runs an offloaded batch's items (SPEC §22)
            or_(B.c.expires_at.is_(None), B.c.expires_at > now),  # an expired batch starts nothing (§14)
            _has_unreserved(B.c.id),
            B.c.policy_id.not_in(bindparam("c_skip", expanding=True)),  # held back by pacing (§17)
        )
        # Fair share (SPEC §17): the project served least recently, then its batch served least
        # recently (never-served first, then the oldest), and the take below its lowest idxs.
        .order_by(
            _project_turn(B.c.project_id).asc().nulls_first(),
            B.c.last_claimed_at.asc().nulls_first(),
            B.c.created_at,
            B.c.id,
        )
        .limit(1)
    )
    chosen = (
        select(I.c.idx)
        .where(I.c.batch_id == batch_id, in_state(AVAILABLE), I.c.claimed_by.is_(None))
        .order_by(I.c.idx)
        .limit(bindparam("c_limit", type_=Integer))
        .cte("chosen")
    )
    take = (
        update(I)
        .where(I.c.batch_id == batch_id, I.c.idx == chosen.c.idx)  # UPDATE … FROM chosen
        .values(claimed_by=bindparam("c_instance", type_=ID), claimed_at=now)  # reserved, still available
        .returning(I.c.idx)
    )
    stamp = update(B).where(B.c.id == batch_id).values(last_claimed_at=now)
    turn = (
        sqlite_insert(T)
        .values(project_id=bindparam("c_project", type_=ID), last_claimed_at=now)
        .on_conflict_do_update(index_elements=[T.c.project_id], set_={"last_claimed_at": now})
    )
    _SQLITE_CLAIM.append(_ClaimSQL(pick, take, stamp, turn))
    return _SQLITE_CLAIM[0]


def _heartbeat_sql(dialect: str) -> Any:
    """This replica's worker row, inserted or refreshed: the database's clock on Postgres (one for
    every replica), the process clock (``c_now``) on SQLite."""
    built = _HEARTBEATS.get(dialect)
    if built is None:
        postgres = dialect == "postgresql"
        now = func.now(type_=UTCDateTime()) if postgres else bindparam("c_now", type_=UTCDateTime())
        values = {"instance_id": bindparam("c_instance", type_=ID), "started_at": now, "heartbeat_at": now}
        built = _HEARTBEATS[dialect] = (
            (pg_insert if postgres else sqlite_insert)(W)
            .values(**values)
            .on_conflict_do_update(index_elements=[W.c.instance_id], set_={"heartbeat_at": now})
        )
    return built


async def claim(
    db: Db, instance_id: str, limit: int, skip_policies: Collection[str] = ()
) -> list[ClaimedItem]:
    """Reserve up to ``limit`` available items of one batch (fair order: the project served least
    recently, then its batch served least recently, ``relay.store.batch_queue`` docstring) for
    ``instance_id`` (committed when this returns). Reserved items stay ``available`` — a cancel on any
    replica cancels them like any waiting item (SPEC §10.2) — and :func:`start` makes them ``running``
    when a worker takes them. ``[]`` when nothing is available unreserved (or, on Postgres, every such
    batch is being claimed by another replica right now). Batches of the policies in ``skip_policies``
    are passed over: their items wait for room (SPEC §17).

    The claimant's heartbeat is refreshed in the same transaction, so an item is never claimed by a
    replica without a worker row (which :func:`rescue` would take for a dead replica).
    """
    if limit < 1:
        return []
    if db.dialect.name == "postgresql":
        return await _claim_postgres(db, instance_id, limit, skip_policies)
    async with write_txn(db) as conn:
        sql = _sqlite_claim_sql()
        now = datetime.now(UTC)
        params: dict[str, Any] = {"c_instance": instance_id, "c_limit": limit, "c_now": now}
        picked = (await conn.execute(sql.pick, {"c_skip": list(skip_policies), "c_now": now})).first()
        if picked is None:
            return []
        batch = record_from_row(picked._mapping)
        params["c_batch"] = batch.id
        params["c_project"] = batch.project_id
        idxs = sorted((await conn.execute(sql.take, params)).scalars())
        if not idxs:
            return []
        await conn.execute(sql.stamp, params)
        await conn.execute(_heartbeat_sql("sqlite"), params)
        # Last: concurrent claims serving one project wait for each other here, for a commit's time.
        await conn.execute(sql.turn, params)
    return [ClaimedItem(batch, idx) for idx in idxs]


# Postgres: the claim (SQLite's conditions and order, with row locks and the database's clock) as text
# for the driver, built once. A claim runs about once per ``limit`` items; through SQLAlchemy's
# per-execution work its statements cost the process more CPU than the database's answer.
# ``policy_id <> ALL(array)`` is ``NOT IN (list)`` with the list as one parameter (empty: every batch).
_PG_PICK: Final = (
    f"SELECT {', '.join(f'batches.{name}' for name in RECORD_FIELDS)} FROM batches"
    " WHERE batches.completed_at IS NULL AND batches.status = 'queued' AND batches.offload_state IS NULL"
    " AND (batches.expires_at IS NULL OR batches.expires_at > now())"
    " AND (SELECT batch_items.idx FROM batch_items WHERE batch_items.batch_id = batches.id"
    " AND batch_items.state = 'available' AND batch_items.claimed_by IS NULL"
    " ORDER BY batch_items.idx LIMIT 1) IS NOT NULL"
    " AND batches.policy_id <> ALL($1::varchar[])"
    " ORDER BY (SELECT batch_project_turns.last_claimed_at FROM batch_project_turns"
    " WHERE batch_project_turns.project_id = batches.project_id) ASC NULLS FIRST,"
    " batches.last_claimed_at ASC NULLS FIRST, batches.created_at, batches.id"
    " LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED"
)
# The claim is ONE statement of data-modifying CTEs, sent in autocommit: the pick above, the take, the
# stamp, the heartbeat and the turn, committed together. As a transaction of five statements it cost
# seven round trips (BEGIN and COMMIT included); on a 2-vCPU VM each round trip's loopback wake-ups cost
# the process more than the statement's own work (``bench/finalize_cost.py``'s claim column).
# - The take locks its rows in a CTE, not in a plain IN (subquery): Postgres evaluates a locking CTE
#   exactly once, whereas a subquery it rescans per outer row skips the rows this very UPDATE already
#   changed and so hands out the next ones, ignoring the LIMIT.
# - The UPDATE joins the locked rows by their whole primary key, both columns from the CTE: a unique
#   key probe per row however stale the statistics (prepared, the statement keeps a generic plan made
#   while the table was small). Given the batch id apart (a parameter), such a plan probed the key index
#   by batch alone and filtered the batch's whole range per row; given the rows' tuple ids, a
#   sequential scan. The rows are locked by us and were re-checked as available when locked, so the
#   UPDATE does not repeat the state test (which would tempt the planner to walk the whole available
#   index).
# - The stamp, the heartbeat and the turn read ``took``: they change nothing when it reserved nothing.
#   Data-modifying CTEs the main query does not read run after it, in this order, so the turn (where
#   concurrent claims serving one project wait for each other) comes last and is held for a commit's
#   time. It uses now(), the transaction's start: of concurrent claims, the one started last may commit
#   first, and its turn must not be moved back by an earlier-started one (SQLite's claims are serial).
# ``$1`` the policies passed over, ``$2`` the limit, ``$3`` the claimant.
_PG_CLAIM: Final = (
    f"WITH picked AS ({_PG_PICK}),"
    " chosen AS (SELECT batch_items.batch_id AS batch_id, batch_items.idx AS idx FROM batch_items"
    " WHERE batch_items.batch_id = (SELECT picked.id FROM picked) AND batch_items.state = 'available'"
    " AND batch_items.claimed_by IS NULL ORDER BY batch_items.idx LIMIT $2::integer"
    " FOR NO KEY UPDATE SKIP LOCKED),"
    " took AS (UPDATE batch_items SET claimed_by = $3::varchar, claimed_at = now()"
    " FROM chosen WHERE batch_items.batch_id = chosen.batch_id AND batch_items.idx = chosen.idx"
    " RETURNING batch_items.idx),"
    " stamped AS (UPDATE batches SET last_claimed_at = now()"
    " WHERE batches.id = (SELECT picked.id FROM picked) AND EXISTS (SELECT 1 FROM took)),"
    " beat AS (INSERT INTO batch_workers (instance_id, started_at, heartbeat_at)"
    " SELECT $3::varchar, now(), now() WHERE EXISTS (SELECT 1 FROM took)"
    " ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = now()),"
    " turn AS (INSERT INTO batch_project_turns (project_id, last_claimed_at)"
    " SELECT picked.project_id, now() FROM picked WHERE EXISTS (SELECT 1 FROM took)"
    " ON CONFLICT (project_id) DO UPDATE"
    " SET last_claimed_at = greatest(batch_project_turns.last_claimed_at, now()))"
    f" SELECT {', '.join(f'picked.{name}' for name in RECORD_FIELDS)},"
    " ARRAY(SELECT took.idx FROM took ORDER BY took.idx) AS idxs FROM picked"
)


async def _claim_postgres(
    db: Db, instance_id: str, limit: int, skip_policies: Collection[str]
) -> list[ClaimedItem]:
    """:func:`claim` on Postgres: ``_PG_CLAIM`` on the driver (``relay.store.driver``), in autocommit,
    or in the transaction of a connection the caller holds in one (it commits or rolls back with it).
    The batch row comes back with the values SQLAlchemy's would have: asyncpg returns ``timestamptz``
    aware (UTC), and ``token_claims`` (``jsonb``) is decoded by the codec SQLAlchemy registered on the
    connection."""
    async with connection(db) as conn:
        if conn.in_transaction():
            raw = await pg_driver(conn)
        else:  # no SQLAlchemy statement: the driver is in autocommit
            raw = await driver_connection(conn)
        picked = await raw.fetchrow(_PG_CLAIM, list(skip_policies), limit, instance_id)
    if picked is None or not picked["idxs"]:
        return []
    batch = record_from_row(picked)
    return [ClaimedItem(batch, idx) for idx in picked["idxs"]]


async def upsert_worker(conn: AsyncConnection, instance_id: str) -> None:
    """Insert or refresh this replica's worker row (the claim's own heartbeat statement)."""
    params: dict[str, Any] = {"c_instance": instance_id}
    if conn.dialect.name != "postgresql":
        params["c_now"] = datetime.now(UTC)
    await conn.execute(_heartbeat_sql(conn.dialect.name), params)


_SQLITE_START = (
    "UPDATE batch_items SET state = 'running', claimed_at = ?"
    " WHERE (batch_id, idx) IN (VALUES {keys}) AND state = 'available' AND claimed_by = ?"
    " AND NOT EXISTS (SELECT 1 FROM batches"
    " WHERE batches.id = batch_items.batch_id AND batches.expires_at <= ?)"
    " RETURNING batch_id, idx"
)
# Postgres: the same statement as text for the driver itself, one per batch of the group. A start runs
# about once per item started; SQLAlchemy's per-execution work was half its CPU cost.
_PG_START = (
    "UPDATE batch_items SET state = 'running', claimed_at = now()"
    " WHERE batch_id = $1 AND idx = ANY($2::integer[]) AND state = 'available' AND claimed_by = $3"
    " AND NOT EXISTS (SELECT 1 FROM batches WHERE id = $1 AND expires_at <= now())"
    " RETURNING idx"
)


async def start(db: Db, instance_id: str, keys: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
    """Make these items, reserved by ``instance_id``, ``running`` (``claimed_at`` = now, which the
    rescue bound measures from); returns those started. ONE conditional statement for the group (per
    batch on Postgres), committed on its own: an item no longer available and reserved by
    ``instance_id`` (cancelled on any replica, or released and taken elsewhere) is left out and must
    not run. A start and a cancel of one item serialise on its row: it started before the cancel
    committed (and finishes, SPEC §10.5) or never does. An item of a batch past its ``expires_at``
    (database clock on Postgres) never starts, even when reserved before the deadline (SPEC §14, §15):
    the expiry sweep cancels it. ``db``: the engine, or on Postgres a
    connection held by the caller outside any transaction (``relay.store.held``)."""
    wanted = sorted(set(keys))
    if not wanted:
        return set()
    if db.dialect.name == "postgresql":
        by_batch: dict[str, list[int]] = {}
        for batch_id, idx in wanted:
            by_batch.setdefault(batch_id, []).append(idx)
        started: set[tuple[str, int]] = set()
        async with connection(db) as conn:  # no SQLAlchemy statement: the driver is in autocommit
            raw = await driver_connection(conn)
            for batch_id, idxs in by_batch.items():
                rows = await raw.fetch(_PG_START, batch_id, idxs, instance_id)
                started.update((batch_id, row[0]) for row in rows)
        return started
    # SQLite: the text on the driver itself too: one hop to aiosqlite's thread instead of four (cursor,
    # execute, fetch, close), each of which waits for the GIL while the event loop is busy.
    stamp = utc_bind_step(db.dialect)(datetime.now(UTC))
    sql = _SQLITE_START.format(keys=", ".join(["(?, ?)"] * len(wanted)))
    params = [stamp, *(part for key in wanted for part in key), instance_id, stamp]
    async with _sqlite_start_conn(db) as conn:
        raw = await driver_connection(conn)
        rows = await raw.execute_fetchall(sql, params)
    return {(row[0], row[1]) for row in rows}


@asynccontextmanager
async def _sqlite_start_conn(db: Db) -> AsyncIterator[AsyncConnection]:
    """The start's connection on SQLite: a write group's turn (``relay.store.write_group``: the
    statement joins its transaction), else a checkout in autocommit (the statement is its own
    transaction)."""
    if isinstance(db, AsyncConnection):
        assert db.in_transaction(), "SQLite: a write group's turn, or the engine"
        yield db
        return
    async with db.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        yield conn
