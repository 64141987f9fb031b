"""Starts reserved batch items in groups (SPEC §10.2, §10.5): ``available`` (reserved) → ``running``.

Part of the batch queue (its SQL, like ``relay.batches.recovery``, uses the queue's rules): :func:`start`
is the statement; :class:`Starter` groups the calls of a replica's worker slots.

Why. A claim only reserves items (they stay ``available``, so a cancel on any replica cancels them);
an item may run only once the database has moved it to ``running`` with a statement that fails if it
was cancelled meanwhile (:func:`start`). One transaction per item start would cost a commit per item
— the very cost claim-ahead removed — so every worker slot that frees up asks here, and a single task
starts whatever has accumulated with ONE statement: at low load a group is one item, started at once;
under load groups grow by themselves while the previous statement is in flight. On Postgres the
statements run on one connection the starter keeps (``relay.batches.held``): a pool checkout would
first ping it (three round trips), which cost more than the statement itself.

Database outages. A start that fails on a transient error is retried with backoff (the items stay
reserved, so no one else takes them meanwhile). Whether a failed attempt committed is unknown: a retry
then finds those items no longer ``available`` and reports them not started; the worker pool drops
them and its orphan check puts them back. Any other error is a bug: the group is reported not started
(logged), and the orphan check releases their reservations.

Invariants. :meth:`Starter.start` answers True only for an item this replica's row now shows ``running``
(committed); a caller that is cancelled while waiting learns nothing, so it must treat the item as
possibly started (the finalizer only finalizes items that are really running).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import bindparam, exists, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.held import Db, HeldConnection
from relay.batches.views import B, I, in_state
from relay.domain.batches import AVAILABLE, RUNNING
from relay.store.engine import is_transient
from relay.store.tables import ID, UTCDateTime

log = logging.getLogger("relay.batches")

Key = tuple[str, int]
MAX_GROUP = 500  # items per statement: bounds its size


_START_SQL: dict[str, Any] = {}
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
    connection held by the caller outside any transaction (``relay.batches.held``)."""
    wanted = sorted(set(keys))
    if not wanted:
        return set()
    if db.dialect.name == "postgresql":
        by_batch: dict[str, list[int]] = {}
        for batch_id, idx in wanted:
            by_batch.setdefault(batch_id, []).append(idx)
        started: set[tuple[str, int]] = set()
        async with _connection(db) as conn:  # no SQLAlchemy statement: the driver is in autocommit
            raw = (await conn.get_raw_connection()).driver_connection
            assert raw is not None
            for batch_id, idxs in by_batch.items():
                rows = await raw.fetch(_PG_START, batch_id, idxs, instance_id)
                started.update((batch_id, row[0]) for row in rows)
        return started
    assert isinstance(db, AsyncEngine), "SQLite: the engine (relay.batches.held hands it out there)"
    async with db.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
        sql = _START_SQL.get("sqlite")
        if sql is None:
            sql = _START_SQL["sqlite"] = (
                update(I)
                .where(
                    tuple_(I.c.batch_id, I.c.idx).in_(bindparam("s_keys", expanding=True)),
                    in_state(AVAILABLE),
                    I.c.claimed_by == bindparam("s_instance", type_=ID),
                    ~exists().where(
                        B.c.id == I.c.batch_id, B.c.expires_at <= bindparam("s_now", UTCDateTime())
                    ),
                )
                .values(state=RUNNING, claimed_at=bindparam("s_now", UTCDateTime()))
                .returning(I.c.batch_id, I.c.idx)
            )
        params = {"s_keys": wanted, "s_instance": instance_id, "s_now": datetime.now(UTC)}
        rows = await conn.execute(sql, params)
        return {(row.batch_id, row.idx) for row in rows}


@contextlib.asynccontextmanager
async def _connection(db: Db) -> AsyncIterator[AsyncConnection]:
    if isinstance(db, AsyncConnection):
        yield db
        return
    async with db.connect() as conn:
        yield conn


class Starter:
    def __init__(self, engine: AsyncEngine, instance_id: str) -> None:
        self._held = HeldConnection(engine)
        self._instance_id = instance_id
        self._waiting: dict[Key, asyncio.Future[bool]] = {}
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def open(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="batch-starter")

    async def start(self, key: Key) -> bool:
        """True once the item is ``running`` here; False when it must not run (cancelled, or no
        longer reserved by this replica)."""
        future = self._waiting.get(key)
        if future is None:
            future = self._waiting[key] = asyncio.get_running_loop().create_future()
            self._arrived.set()
        return await asyncio.shield(future)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._held.close()
        for future in self._waiting.values():
            if not future.done():
                future.set_result(False)
        self._waiting.clear()

    async def _loop(self) -> None:
        delay = 0.2
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self._waiting:
                group = list(self._waiting)[:MAX_GROUP]
                try:
                    async with self._held.use() as db:
                        started = await start(db, self._instance_id, group)
                except Exception as exc:
                    if is_transient(exc):
                        log.warning(
                            "starting %d batch items failed (%s); retrying in %.1f s",
                            len(group),
                            type(exc).__name__,
                            delay,
                        )
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 5.0)
                        continue
                    log.exception("starting %d batch items failed; they are not run", len(group))
                    started = set()
                delay = 0.2
                for key in group:
                    future = self._waiting.pop(key)
                    if not future.done():
                        future.set_result(key in started)
