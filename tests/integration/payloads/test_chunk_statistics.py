"""Postgres statistics of ``payload_chunks`` after a big submit (``relay.store.payload_chunks``): a batch
that adds more than a tenth to what the statistics know is followed by ``ANALYZE payload_chunks``, so
its bodies are not read with the plans of an empty table until autovacuum comes round; a small batch
next to many known rows leaves them to autovacuum. Postgres only (SQLite has no planner statistics
to refresh here)."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.ids import mint_id
from relay.payloads.database import DatabaseStore


async def analyzed(engine: AsyncEngine) -> tuple[float, int]:
    """(rows the statistics know, how many times the table was analyzed by hand)."""
    async with engine.connect() as conn:
        known = (
            await conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = 'payload_chunks'::regclass"))
        ).scalar_one()
        await conn.execute(text("SELECT pg_stat_clear_snapshot()"))
        count = (
            await conn.execute(
                text("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'payload_chunks'")
            )
        ).scalar_one()
    return float(known), int(count)


async def test_a_batch_that_grows_the_table_by_a_tenth_is_analyzed(engine: AsyncEngine) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("planner statistics: Postgres")
    store = DatabaseStore(engine)
    _, before = await analyzed(engine)
    await store.write_requests(mint_id("b"), (b'{"n": %d}' % i for i in range(999)))
    assert (await analyzed(engine))[1] == before  # under ANALYZE_MIN: autovacuum's business

    await store.write_requests(mint_id("b"), (b'{"n": %d}' % i for i in range(20_000)))
    known, count = await analyzed(engine)
    assert count == before + 1 and known >= 20_000

    await store.write_requests(mint_id("b"), (b'{"n": %d}' % i for i in range(1_000)))  # < a tenth more
    assert (await analyzed(engine))[1] == before + 1
