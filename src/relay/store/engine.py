"""The database engine: URL handling, connection setup, and every SQLite/Postgres difference.

Relay takes URLs in plain SQLAlchemy form (``sqlite:///relay-data/relay.db``,
``postgresql://user@host/db``) and runs them on asyncio drivers (aiosqlite, asyncpg). SQLite gets
foreign keys switched on (it ignores them otherwise), WAL and a busy timeout, so the embedded default
enforces the same references as Postgres.

Integrity errors from either dialect are classified here into one small vocabulary so repositories can
answer "duplicate name" or "still referenced" without knowing which database they run on.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

#: The names the layers above the store use for an engine, a connection and a refused write, without
#: importing SQLAlchemy (``relay.batches`` does no SQL: it hands these to the store, never builds a
#: statement). ``DuplicateRow``: what a write refused by a unique key or a CHECK raises (nothing written).
Engine: TypeAlias = AsyncEngine
Connection: TypeAlias = AsyncConnection
DuplicateRow = IntegrityError

ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


def async_url(url: str) -> URL:
    """The URL with the asyncio driver of its dialect (any driver named in the URL is replaced)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    return parsed.set(drivername=ASYNC_DRIVERS[backend])


def is_postgres(url: str) -> bool:
    return make_url(url).get_backend_name() == "postgresql"


def asyncpg_dsn(url: str) -> str:
    """A DSN asyncpg accepts directly (for the LISTEN connection, which lives outside the pool)."""
    parsed = make_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def create_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    parsed = async_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            path = Path(database)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                # It holds sealed upstream keys and password hashes: readable by the owner only.
                path.touch(mode=0o600)
        engine = create_async_engine(
            parsed, poolclass=NullPool if database == ":memory:" else None, hide_parameters=True
        )
        event.listen(engine.sync_engine, "connect", _sqlite_on_connect)
        event.listen(engine.sync_engine, "begin", _sqlite_on_begin)
        return engine
    # hide_parameters: an error's text never carries bound values (prompts, hashes) into a log line.
    return create_async_engine(
        parsed, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, hide_parameters=True
    )


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    # The sqlite3 module's own transaction handling defers BEGIN and breaks SAVEPOINTs; switch it off
    # and emit BEGIN ourselves (SQLAlchemy's documented recipe), so nested rollbacks really roll back.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    _switch_to_wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    """Put the file in WAL mode (persistent: later connections find it done and take no lock).

    Switching a new file needs an exclusive lock, and SQLite answers "database is locked" at once
    rather than calling the busy handler when another connection is opening the same new file (a
    deadlock guard): two processes starting together on one fresh file — `relay serve` and
    `relay migrate`, or two test replicas — failed this way about once in ten. So the switch is retried
    for up to the busy timeout. The wait blocks the connecting thread (with aiosqlite, the event
    loop's), which is acceptable only because it can happen on a brand-new file alone, i.e. at boot.
    """
    cursor.execute("PRAGMA journal_mode")
    row = cursor.fetchone()
    if row is not None and str(row[0]).lower() == "wal":
        return
    deadline = time.monotonic() + 10.0
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.02)


def _sqlite_on_begin(conn: Any) -> None:
    # ``conn.execution_options(sqlite_begin="IMMEDIATE")`` takes the write lock up front (migrations,
    # queue claims); plain BEGIN keeps WAL readers concurrent.
    options = conn.get_execution_options()
    if options.get("isolation_level") == "AUTOCOMMIT":
        return
    mode = options.get("sqlite_begin", "")
    if mode not in ("", "DEFERRED", "IMMEDIATE", "EXCLUSIVE"):
        raise ValueError(f"unknown sqlite_begin mode {mode!r}")
    conn.exec_driver_sql(f"BEGIN {mode}".strip())


@dataclass(frozen=True)
class IntegrityProblem:
    kind: Literal["unique", "foreign_key", "check", "not_null", "other"]
    detail: str  # the column (unique) or constraint name when the driver says it; else ""


_SQLITE_UNIQUE = re.compile(r"UNIQUE constraint failed: ([\w.]+)")
_SQLITE_CHECK = re.compile(r"CHECK constraint failed: (\w+)")


def classify_integrity_error(exc: IntegrityError) -> IntegrityProblem:
    orig = exc.orig
    sqlstate = _sqlstate(exc)
    text = str(orig)
    if sqlstate == "23505" or "UNIQUE constraint failed" in text:
        match = _SQLITE_UNIQUE.search(text)
        if match:
            return IntegrityProblem("unique", match.group(1).split(".")[-1])
        key = re.search(r"Key \((\w+)", text)
        return IntegrityProblem("unique", key.group(1) if key else "")
    if sqlstate == "23503" or "FOREIGN KEY constraint failed" in text:
        return IntegrityProblem("foreign_key", "")
    if sqlstate == "23514" or "CHECK constraint failed" in text:
        match = _SQLITE_CHECK.search(text)
        return IntegrityProblem("check", match.group(1) if match else "")
    if sqlstate == "23502" or "NOT NULL constraint failed" in text:
        return IntegrityProblem("not_null", "")
    return IntegrityProblem("other", "")


def is_transient(exc: BaseException) -> bool:
    """True for a failure that says nothing about the statement: the database restarted, the
    connection dropped or was refused, or SQLite's lock was busy. Retrying the same transaction later
    is the right answer; an integrity or programming error is not transient."""
    if isinstance(exc, OperationalError) and type(exc.orig).__module__.startswith("sqlite3"):
        # SQLite reports syntax errors as OperationalError too; only a busy or locked file is transient.
        return any(word in str(exc.orig) for word in ("locked", "busy"))
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated) or _sqlstate(exc).startswith(_TRANSIENT_SQLSTATES)
    if type(exc).__module__.startswith("asyncpg"):  # raised by a statement run on the driver itself
        state = getattr(exc, "sqlstate", None)
        if isinstance(state, str) and state.startswith(_TRANSIENT_SQLSTATES):
            return True
        # ConnectionDoesNotExistError and the like, or a connection the driver already saw closed.
        return "Connection" in type(exc).__name__ or "connection is closed" in str(exc)
    return isinstance(exc, (OSError, TimeoutError))


def database_unavailable(exc: BaseException) -> bool:
    """Is this failure the database being unreachable or too busy (a transient error, or a pool that
    timed out), rather than a bug? The HTTP apps answer it with a 503 and ``Retry-After``
    (``relay.http.errors.escaped``); a pool timeout is not retried by the batch loops, only by clients."""
    return isinstance(exc, PoolTimeout) or is_transient(exc)


def startup_problem(exc: BaseException, masked_url: str) -> str:
    """One line saying what to fix when the database fails ``relay serve`` or ``relay migrate`` at
    start: a database that does not exist (named, with how to create it), a refused login, a server
    that cannot be reached, a schema that is missing or old. ``masked_url`` is RELAY_DATABASE_URL
    with its password masked (the line is printed and logged); never a traceback."""
    state = _sqlstate(exc) if isinstance(exc, DBAPIError) else getattr(exc, "sqlstate", None) or ""
    detail = (str(getattr(exc, "orig", None) or exc).splitlines() or [type(exc).__name__])[0]
    url = make_url(masked_url)
    where = f"{url.host or 'localhost'}:{url.port or 5432}"
    if state == _NO_SUCH_DATABASE:
        name = url.database or ""
        return (
            f'the database "{name}" does not exist on {where}: create it (`createdb {name}`, or '
            f'CREATE DATABASE "{name}"), or point RELAY_DATABASE_URL ({masked_url}) at one that exists'
        )
    if state in _LOGIN_REFUSED:
        return f"the database at RELAY_DATABASE_URL ({masked_url}) refused the login: {detail}"
    if isinstance(exc, OSError) or "connect" in detail.lower():
        return f"cannot reach the database at RELAY_DATABASE_URL ({masked_url}): {detail}"
    if state == _NO_SUCH_TABLE or "no such table" in detail:
        return "the database schema is missing or old: run `relay migrate` (or let boot migrate)"
    return f"database error at start: {detail}"


# Postgres SQLSTATEs of a start that cannot go on: invalid_catalog_name (the database named in the
# URL does not exist), invalid_password / invalid_authorization_specification, undefined_table.
_NO_SUCH_DATABASE = "3D000"
_LOGIN_REFUSED = ("28P01", "28000")
_NO_SUCH_TABLE = "42P01"

# Postgres SQLSTATE classes: 08 connection exception, 57P01–57P03 admin/crash shutdown and "the
# database system is starting up" (a restart in progress), 40001/40P01 serialization failure/deadlock.
_TRANSIENT_SQLSTATES = ("08", "57P0", "40001", "40P01")


def _sqlstate(exc: DBAPIError) -> str:
    orig = exc.orig
    state = getattr(orig, "sqlstate", None) or getattr(getattr(orig, "__cause__", None), "sqlstate", None)
    return state if isinstance(state, str) else ""
