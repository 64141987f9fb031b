"""Alembic's entry point for Relay: runs the revisions in ``versions/`` on a connection it is given.

The normal path is :mod:`relay.store.migrate`, which opens the transaction (and, on Postgres, takes
the advisory lock) and passes the sync ``Connection`` in ``config.attributes["connection"]``; this
file then only configures the context on it and never commits: the caller's transaction does.

Without a connection (development: ``command.revision(..., autogenerate=True)`` while writing a new
revision, ``command.check``, ``command.upgrade(..., sql=True)``), the URL comes from the
``sqlalchemy.url`` option or ``RELAY_DATABASE_URL`` and env.py opens its own engine, WITHOUT the
safeguards of ``relay.store.migrate`` (advisory lock, SQLite foreign-key handling); offline mode
renders the SQL instead of running it.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection

from relay.store.engine import create_engine
from relay.store.migrate import COMPARE_OPTIONS
from relay.store.tables import metadata

config = context.config
target_metadata = metadata


def _database_url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("RELAY_DATABASE_URL")
    if not url:
        raise RuntimeError(
            "no connection in config.attributes['connection'] and no sqlalchemy.url / RELAY_DATABASE_URL"
        )
    return url


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table ("move and copy") instead.
        render_as_batch=connection.dialect.name == "sqlite",
        **COMPARE_OPTIONS,
    )
    # Inside the caller's transaction this is a no-op: alembic sees the external transaction.
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(run_on)
    finally:
        await engine.dispose()


def run_offline() -> None:
    url = _database_url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=url.startswith("sqlite"),
        **COMPARE_OPTIONS,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    if context.is_offline_mode():
        run_offline()
        return
    connection = config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
    else:
        asyncio.run(_run_with_own_engine(_database_url()))


main()
