"""Migrated databases of each backend for the queue tests.

Creating and migrating a Postgres database costs about a second, so the module migrates one database per
backend (``migrated_url``) and every test starts from empty queue and usage tables (``engine``). Tests
that change the schema on purpose (a trigger) take a fresh database of their own (``database_url``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.hooks import FinishedBatch, FinishHooks
from relay.store import batches as batch_store
from relay.store import tables as t
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from tests.fixtures.databases import emptied_engine


@pytest.fixture
async def engine(migrated_url: str) -> AsyncIterator[AsyncEngine]:
    async with emptied_engine(
        migrated_url,
        (
            t.usage_events,
            t.usage_rollup,
            t.batch_items,
            t.batches,
            t.batch_workers,
            t.batch_project_turns,
            t.idempotency_keys,
        ),
    ) as engine:
        yield engine


@pytest.fixture
async def pg(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    """A fresh Postgres database of the test's own, migrated: for checks of the planner's plans, whose
    statistics must be the test's alone (none until it runs ANALYZE)."""
    engine = create_engine(postgres_url)
    try:
        await upgrade_to_head(engine)
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def replica_engines(migrated_url: str, engine: AsyncEngine) -> AsyncIterator[list[AsyncEngine]]:
    """Three more engines on the same database (``engine`` has emptied it): three replicas."""
    engines = [create_engine(migrated_url) for _ in range(3)]
    try:
        yield engines
    finally:
        for other in engines:
            await other.dispose()


class Finished(list[FinishedBatch]):
    """The batches finishing transactions reported to :attr:`hooks` (pass them to what finishes)."""

    hooks: FinishHooks


@pytest.fixture
def finished() -> Finished:
    """Every batch a finishing transaction reported, via a hook that also writes a row in that
    transaction (proving it runs inside it), passed explicitly as ``hooks=finished.hooks``."""
    seen = Finished()

    async def hook(conn: AsyncConnection, batches: Sequence[FinishedBatch]) -> None:
        seen.extend(batches)
        for batch in batches:
            await batch_store.set_api_state(conn, batch.id, api_status="finished-hook")

    seen.hooks = FinishHooks(hook)
    return seen
