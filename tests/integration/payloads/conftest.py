"""The payload seam's suites run on every store (``files``: a real directory; ``database``: real
SQLite and Postgres). A module migrates one database per backend (``migrated_url``); each test gets an
``engine`` over it with the payload and file rows emptied."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from tests.fixtures.databases import emptied_engine


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    async with emptied_engine(migrated_url, (t.payload_chunks, t.files)) as engine:
        yield engine
