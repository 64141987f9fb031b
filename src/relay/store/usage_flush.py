"""One flush of the live usage writer: its events, their rollup sums and its payload captures, in one
transaction of their own.

Why. The writer flushes every 50 ms, so what a flush costs whatever its size is paid 20 times a second
and shared by the requests of those 50 ms: at 500 requests a second, 25. Through SQLAlchemy on
aiosqlite a flush was a pool checkout (with its reset on return), then ``BEGIN``, each executemany and
``COMMIT`` as several hops each to aiosqlite's thread (cursor, execute, close), every hop a wake-up of
the event loop: about 1.6 ms of CPU before the first row (``bench/usage_flush.py``). On SQLite the
whole transaction here is one call on aiosqlite's thread, on a connection the writer keeps between
flushes. On Postgres it is SQLAlchemy's transaction on that kept connection (no pool checkout and
pre-ping per flush), with ``relay.store.usage.insert_events`` (its rollup upsert is one statement over
arrays there, not one per row).

What it deliberately does not know. Queueing, retries and what a refusal means (``relay.usage.writer``).

Invariants. All or nothing: a failure rolls the whole flush back before it is raised. The statements
and parameters are exactly those of ``relay.store.usage.insert_events`` (the compiled inserts and bind
steps, the rollup's aggregated upsert). A driver error raised on SQLite's thread is raised as the
SQLAlchemy error SQLAlchemy would have raised for it (``IntegrityError``, ``OperationalError``, …), so
``relay.store.write_errors.refused`` and ``relay.store.engine.is_transient`` read it as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t
from relay.store import usage, usage_rollup
from relay.store.driver import driver_connection

_Statements = list[tuple[str, list[tuple[Any, ...]]]]


async def write_flush(conn: AsyncConnection, events: Sequence[Any], payloads: Sequence[Any]) -> None:
    """Write ``events`` (usage events) and ``payloads`` (captures: one attribute per ``payloads``
    column) in one transaction on ``conn``, which must be in none."""
    dialect = conn.dialect
    if dialect.name != "sqlite":
        async with conn.begin():
            await usage.insert_events(conn, events)
            if payloads:
                bulk = usage.bulk_insert(dialect, t.payloads)
                await conn.exec_driver_sql(bulk.sql, [bulk.params(p) for p in payloads])
        return
    events_insert = usage.bulk_insert(dialect)
    statements: _Statements = [(events_insert.sql, [events_insert.params(event) for event in events])]
    if events:
        statements.append((usage_rollup.upsert_sql(dialect), usage_rollup.aggregate(events)))
    if payloads:
        payloads_insert = usage.bulk_insert(dialect, t.payloads)
        statements.append((payloads_insert.sql, [payloads_insert.params(p) for p in payloads]))
    raw = await driver_connection(conn)
    error = dialect.loaded_dbapi.Error
    try:
        if not raw._running or raw._connection is None:
            # aiosqlite would raise ValueError("Connection closed"), which reads as a refused row
            # (``refused``) and would drop the flush: a closed connection is an outage.
            raise dialect.loaded_dbapi.OperationalError("the usage writer's connection is closed")
        await raw._execute(_transaction, raw._conn, statements)
    except error as exc:
        raise DBAPIError.instance("usage flush", None, exc, error) from exc


def _transaction(db: sqlite3.Connection, statements: _Statements) -> None:
    """On aiosqlite's thread: the flush's transaction, whole. The connection is in autocommit mode
    (``relay.store.engine`` turns the sqlite3 module's own transactions off), so ``BEGIN`` and
    ``COMMIT`` are ours, as SQLAlchemy's would be."""
    db.execute("BEGIN")
    try:
        for sql, rows in statements:
            if rows:
                db.executemany(sql, rows)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
