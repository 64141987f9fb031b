"""Migrated databases of each backend for the queue tests.

Creating and migrating a Postgres database costs about a second, so the module migrates one database per
backend (``migrated_url``) and every test starts from empty queue and usage tables (``engine``). Tests
that change the schema on purpose (a trigger) take a fresh database of their own (``database_url``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from tests.fixtures.databases import create_postgres_database, drop_postgres_database


async def migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def migrated_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('batches') / 'relay.db'}"
        asyncio.run(migrate(url))
        yield url
        return
    url = create_postgres_database()
    try:
        asyncio.run(migrate(url))
        yield url
    finally:
        drop_postgres_database(url)


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(migrated_url)
    async with engine.begin() as conn:
        for table in (t.usage_events, t.batch_items, t.batches, t.batch_workers):
            await conn.execute(delete(table))
    try:
        yield engine
    finally:
        await engine.dispose()
