"""Revision 0013 (SPEC §17 "Retry"): ``batches.retry_of`` and ``batch_items.source_idx``, nullable, added
and removed again, on SQLite and Postgres."""

from __future__ import annotations

from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.migrate import check_schema, current_revision, downgrade_to, upgrade_to_head


async def nullable_columns(engine: AsyncEngine, table: str) -> dict[str, bool]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_columns(table))
    return {c["name"]: bool(c["nullable"]) for c in found}


async def test_0013_adds_retry_of_and_source_idx_and_takes_them_away_again(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    await downgrade_to(engine, "0013")  # later revisions first (by name: only to reach this one)
    assert (await nullable_columns(engine, "batches"))["retry_of"] is True
    assert (await nullable_columns(engine, "batch_items"))["source_idx"] is True

    await downgrade_to(engine, "-1")  # relative: re-chaining the revisions never breaks this test
    assert await current_revision(engine) != "0013"
    assert "retry_of" not in await nullable_columns(engine, "batches")
    assert "source_idx" not in await nullable_columns(engine, "batch_items")

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
