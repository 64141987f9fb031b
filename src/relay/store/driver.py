"""The asyncpg connection under a SQLAlchemy transaction: for the batch queue's hot statements, whose
text goes to the driver itself on Postgres.

Why. A batch item's claim and finalize are a handful of short statements each, run many times a
second; through ``AsyncConnection.execute`` each execution costs more Relay CPU (compile-cache lookup,
parameter processing, result wrapping, the adapter's cursor) than the statement itself costs the
database. Their text is built once and executed with asyncpg's ``fetch``/``execute``/``executemany``
on the connection SQLAlchemy checked out, inside the transaction SQLAlchemy opened: commit and
rollback stay SQLAlchemy's.

What it deliberately does not know. SQL. The callers build their statements and parameters in the
driver's terms (``$n``, tz-aware datetimes, lists for arrays, JSON as text).

Invariants. SQLAlchemy's asyncpg adapter sends ``BEGIN`` lazily, with its first statement: a
statement sent to the driver before any other would run outside the transaction, in autocommit.
:func:`pg_driver` therefore begins the adapter's transaction itself when the SQLAlchemy connection is
in one and the driver is not, and refuses to hand the driver out otherwise, so a driver statement is
never committed apart from its transaction. A failed ``BEGIN`` raises SQLAlchemy's error, as its own
would; errors the driver's statements raise are asyncpg's own (``relay.store.engine.is_transient``
knows them); the transaction still rolls back as a whole.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import PoolProxiedConnection


async def pooled(conn: AsyncConnection) -> PoolProxiedConnection:
    """``conn``'s pooled DBAPI connection, as ``AsyncConnection.get_raw_connection`` gives it. An open,
    valid connection holds it already, and reading it there needs no greenlet: ``get_raw_connection``
    always spawns one (in case it must reconnect), which cost about 15 µs of the 120 µs a batch start
    statement took in process. An invalidated connection still goes through it, and reconnects."""
    sync = conn.sync_connection
    if sync is not None and not sync.closed and not sync.invalidated:
        return sync.connection  # an attribute read: no I/O while the connection is valid
    return await conn.get_raw_connection()


async def driver_connection(conn: AsyncConnection) -> Any:
    """The driver's own connection under ``conn`` (asyncpg's or aiosqlite's), see :func:`pooled`."""
    raw = (await pooled(conn)).driver_connection
    assert raw is not None
    return raw


async def pg_driver(conn: AsyncConnection) -> Any:
    """The asyncpg connection of ``conn``, inside ``conn``'s transaction (begun now if SQLAlchemy has
    not sent its ``BEGIN`` yet). ``conn`` must be in a transaction: an autocommit statement on the
    driver needs no help (``relay.store.batch_queue._claims.start``)."""
    if not conn.in_transaction():
        raise RuntimeError("pg_driver: the connection is not in a transaction")
    fairy = await pooled(conn)
    raw = fairy.driver_connection
    assert raw is not None
    if not raw.is_in_transaction():
        adapter: Any = fairy.dbapi_connection
        # SQLAlchemy's asyncpg adapter (AsyncAdapt_asyncpg_connection): what its cursor does before the
        # transaction's first statement, under the same mutex.
        async with adapter._execute_mutex:
            if adapter._transaction is None:
                try:
                    await adapter._start_transaction()
                except conn.dialect.loaded_dbapi.Error as exc:
                    # The adapter raised its DBAPI error (connection closed, database restarting):
                    # wrap it as SQLAlchemy would have around its own BEGIN, so callers (and
                    # ``relay.store.engine.is_transient``) see the error a statement would raise.
                    raise DBAPIError.instance("BEGIN", None, exc, conn.dialect.loaded_dbapi.Error) from exc
        if not raw.is_in_transaction():
            raise RuntimeError("pg_driver: SQLAlchemy began no transaction on the driver (autocommit?)")
    return raw
