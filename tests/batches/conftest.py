"""Migrated databases of each backend for the queue tests.

Creating and migrating a Postgres database costs about a second, so the module migrates one database per
backend (``migrated_url``) and every test starts from empty queue and usage tables (``engine``). Tests
that change the schema on purpose (a trigger) take a fresh database of their own (``database_url``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store.engine import create_engine
from tests.fixtures.databases import emptied_engine


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    async with emptied_engine(
        migrated_url, (t.usage_events, t.batch_items, t.batches, t.batch_workers, t.idempotency_keys)
    ) as engine:
        yield engine


@pytest.fixture
async def replicas(migrated_url: str, engine: AsyncEngine) -> AsyncIterator[list[AsyncEngine]]:
    """Three more engines on the same database (``engine`` has emptied it): three replicas."""
    engines = [create_engine(migrated_url) for _ in range(3)]
    try:
        yield engines
    finally:
        for other in engines:
            await other.dispose()
