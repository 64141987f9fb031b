"""Schema migrations: bring a database to the schema ``tables.py`` describes, safely, at boot.

What it does. The Alembic revisions shipped in ``relay/migrations`` (no ``alembic.ini``; the config is
built here) run on a connection of Relay's own :class:`AsyncEngine`, inside ONE transaction:

* Postgres: the transaction first takes ``pg_advisory_xact_lock(MIGRATION_LOCK_KEY)``, so replicas
  booting together migrate one after another; the later ones then read the version row the first one
  committed and find nothing to do. That relies on READ COMMITTED (Postgres' default, and the
  engine's), where each statement sees what was committed before it started: under REPEATABLE READ
  the lock statement itself would fix a stale snapshot. DDL is transactional, so a failed revision
  leaves the database exactly as it was.
* SQLite: the transaction is ``BEGIN IMMEDIATE`` (the write lock up front, so two processes migrating
  one file serialise the same way, waiting up to the engine's busy timeout; DDL is transactional in
  SQLite too, so a failure rolls everything back), and foreign keys are switched off around it, as
  SQLite's documented table-rebuild procedure requires: a batch-mode "move and copy" ALTER drops the
  old table, and with foreign keys on that DROP would cascade-delete (or be refused for) every row
  referencing it. ``PRAGMA foreign_key_check`` must come back empty before the commit, and foreign
  keys are switched back on before the connection returns to the pool (or it is invalidated).
* Within one process, migrations on one event loop run one at a time: Alembic keeps its ``context``
  and ``op`` in module globals. (Migrating from several threads at once is not supported.)

What it does not know. It trusts the ``alembic_version`` row: a database altered by hand behind
Alembic's back is not repaired by upgrading. :func:`check_schema` is the tool for that: it compares the
live schema with ``tables.metadata`` the way autogenerate does (tables, columns, types, nullability,
server defaults, indexes, unique constraints, foreign keys with their ON DELETE), but NOT check
constraints, which Alembic does not compare, nor, on SQLite, ``DateTime(timezone=True)``, which SQLite
has no type for. It never downgrades on its own: an older Relay finding a newer revision stops with
Alembic's "Can't locate revision" rather than guessing.

Invariants. The head revision's schema equals ``tables.py`` (``check_schema`` returns ``[]`` right
after ``upgrade_to_head``; the tests hold this on both backends). There is a single head. Revisions are
frozen: they never import ``tables.py``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, MetaData, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.tables import metadata

MIGRATIONS_DIR: Final = Path(__file__).resolve().parent.parent / "migrations"

# Key of the Postgres advisory lock that serialises migrators: the bytes "relaymig" as a bigint.
# Constant across versions, so an old and a new Relay booting together exclude each other too.
MIGRATION_LOCK_KEY: Final = int.from_bytes(b"relaymig", "big")


def compare_server_default(
    context: MigrationContext,
    inspected_column: Column[Any],
    metadata_column: Column[Any],
    inspected_default: str | None,
    metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """Alembic's server-default comparison, minus its one false alarm on Relay's schema.

    SQLite reflects ``DEFAULT ''`` (``teams.display_name``) as ``''``, which Alembic's SQLite support
    takes for an SQL expression (its quote-stripping patterns need a non-empty string), wraps as
    ``('')`` and then reports as changed on every run. ``None`` means "no opinion": Alembic's own
    comparison decides, exactly as with ``compare_server_default=True``.
    """
    if (
        context.dialect.name == "sqlite"
        and rendered_metadata_default == ""
        and inspected_default in ("''", "('')")
    ):
        return False
    return None


# How the schema is compared with tables.py, by env.py (autogenerate) and check_schema alike.
COMPARE_OPTIONS: Final[dict[str, Any]] = {
    "compare_type": True,
    "compare_server_default": compare_server_default,
}


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for the revisions in the package; ``connection`` is what env.py runs on."""
    config = Config()
    # The value goes through configparser interpolation: a '%' in the install path must be doubled.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The revision the installed code's schema corresponds to."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError(f"no migration revisions in {MIGRATIONS_DIR}")
    return head


async def upgrade_to_head(engine: AsyncEngine) -> None:
    """Apply every revision the database lacks; a no-op when it is already at head."""
    await _migrate(engine, lambda config: command.upgrade(config, "head"))


async def downgrade_to(engine: AsyncEngine, revision: str) -> None:
    """Undo revisions down to ``revision`` (``"base"``: an empty database but for alembic_version)."""
    await _migrate(engine, lambda config: command.downgrade(config, revision))


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at; ``None`` for a database never migrated (or downgraded to base)."""
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())


async def check_schema(engine: AsyncEngine, *, target: MetaData = metadata) -> list[Any]:
    """Alembic's autogenerate diff from the database to ``target`` (``tables.metadata``); ``[]`` means
    they agree. Tables in the database that ``target`` lacks count as differences (``remove_table``).

    Each entry is what autogenerate would emit, e.g. ``("add_table", Table)`` or, for column changes,
    a list of ``("modify_type", schema, table, column, info, old, new)`` tuples.
    """

    def diff(sync: Connection) -> list[Any]:
        context = MigrationContext.configure(sync, opts={**COMPARE_OPTIONS, "target_metadata": target})
        return list(compare_metadata(context, target))

    async with engine.connect() as conn:
        return await conn.run_sync(diff)


async def _migrate(engine: AsyncEngine, run: Callable[[Config], None]) -> None:
    # Alembic's ``context`` and ``op`` are process-wide proxies: two migrations interleaving on one
    # event loop (say two engines, or two databases, at once) would run on each other's context.
    async with _loop_lock(), engine.connect() as conn:
        await conn.run_sync(_in_one_transaction, run)


_LOOP_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def _loop_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _LOOP_LOCKS.get(loop)
    if lock is None:
        lock = _LOOP_LOCKS[loop] = asyncio.Lock()
    return lock


def _in_one_transaction(connection: Connection, run: Callable[[Config], None]) -> None:
    if connection.dialect.name == "sqlite":
        _sqlite_migrate(connection, run)
        return
    with connection.begin():
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        run(alembic_config(connection))


def _sqlite_migrate(connection: Connection, run: Callable[[Config], None]) -> None:
    # PRAGMA foreign_keys is silently ignored inside a transaction, so it is set on the driver
    # connection directly (SQLAlchemy would open a transaction first), before BEGIN and after the end.
    _sqlite_foreign_keys(connection, on=False)
    try:
        with connection.begin():
            _sqlite_begin_immediate(connection)
            run(alembic_config(connection))
            dangling = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
            if dangling:
                raise RuntimeError(f"migration left rows with dangling foreign keys: {dangling[:10]}")
    finally:
        try:
            _sqlite_foreign_keys(connection, on=True)
        except Exception:
            connection.invalidate()  # never hand a connection without foreign keys back to the pool
            raise


def _sqlite_foreign_keys(connection: Connection, *, on: bool) -> None:
    dbapi_connection = connection.connection.dbapi_connection
    assert dbapi_connection is not None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
        cursor.execute("PRAGMA foreign_keys")
        row = cursor.fetchone()
    finally:
        cursor.close()
    if row is None or bool(row[0]) != on:
        raise RuntimeError(f"SQLite ignored PRAGMA foreign_keys={on}: a transaction is open")


def _sqlite_begin_immediate(connection: Connection) -> None:
    """Turn the transaction SQLAlchemy just began into ``BEGIN IMMEDIATE`` (the write lock now).

    Depending on how the engine drives the driver, SQLAlchemy's begin either sent nothing yet (the
    sqlite3 module's own deferred handling) or sent a plain ``BEGIN``; that one is still empty, so it
    is ended and replaced. Commit and rollback then end the immediate transaction as usual.
    """
    driver_connection = connection.connection.driver_connection
    assert driver_connection is not None
    if driver_connection.in_transaction:
        connection.exec_driver_sql("ROLLBACK")
    connection.exec_driver_sql("BEGIN IMMEDIATE")
