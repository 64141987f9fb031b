"""One Postgres connection that a single batch task (the dispatcher, the starter, the finalizer) keeps
between its statements.

Why. On Postgres every pool checkout first pings the connection (``pool_pre_ping``: BEGIN, ``;``,
ROLLBACK — three round trips), and the batch loops used to check out once per claim, per start group
and per finalize group: at 0 ms upstream latency the starter's pings alone cost more CPU than its
statement. A task that uses its connection again within ``idle_s`` keeps it, unpinged; one idle for
longer gives it back to the pool first, so the next use checks out (and pings) as before: a
connection is never reused unchecked after a quiet spell, and a database restart is met as before.

What it deliberately does not know. SQL, and what the task does with the connection. On SQLite
(no ping there, and one writer at a time) :meth:`HeldConnection.use` simply hands out the engine, so
the callers' statements check out per use exactly as before; the batch engine's own hot loops take
turns in one shared connection there instead (``relay.store.write_group``).

Invariants. Not shared: one task, one use at a time. A use that raises (or is cancelled) invalidates
its connection, which is never used again (its state is unknown); the next use checks out a fresh
one. A connection is handed out outside any transaction, and :meth:`HeldConnection.close` gives it
back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

#: What the batch queue's statements run on: the engine (a checkout per use) or a held connection.
Db = AsyncEngine | AsyncConnection


class Turns(Protocol):
    """Where a batch task's statements run, one use at a time: its own :class:`HeldConnection`, or a
    turn of the replica's SQLite write group (``relay.store.write_group.WriteGroup``)."""

    def use(self) -> AbstractAsyncContextManager[Db]: ...


IDLE_S = 1.0  # a connection unused for longer is given back, and the next use checks out (and pings)


class HeldConnection:
    def __init__(
        self, engine: AsyncEngine, *, idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine
        self._idle_s = idle_s
        self._clock = clock
        self._held = engine.dialect.name == "postgresql"
        self._conn: AsyncConnection | None = None
        self._last_used = 0.0

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[Db]:
        if not self._held:
            yield self._engine
            return
        conn, self._conn = self._conn, None  # while in use, nothing is held
        if conn is not None and self._clock() - self._last_used > self._idle_s:
            await _give_back(conn)
            conn = None
        if conn is None:
            conn = await self._engine.connect()
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            await _give_back(conn)
            raise
        if conn.in_transaction():  # a caller's bug; never keep a connection inside a transaction
            await _give_back(conn)
            return
        self._conn, self._last_used = conn, self._clock()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await _give_back(conn)


async def _give_back(conn: AsyncConnection) -> None:
    with contextlib.suppress(Exception):
        await conn.close()
