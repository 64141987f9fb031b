"""Migrated databases of each backend for the usage store and writer tests.

Creating and migrating a Postgres database costs about a second, so each test module migrates one
database per backend (``migrated_url``) and every test starts from empty usage tables (``engine``).
Tests that break the database on purpose take their own (``postgres_url``). ``gateway`` is the live
plane of ``tests.fixtures.live`` (a relay with a catalog on the fake upstream) for end-to-end tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from tests.fixtures.databases import emptied_engine


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    async with emptied_engine(
        migrated_url, (t.usage_events, t.usage_rollup, t.payloads, t.settings)
    ) as engine:
        yield engine
