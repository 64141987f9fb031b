"""Migration 0023 (SPEC §22): ``usage_events.offloaded`` (false for every event written before it) and
``batches.offload_key_id`` (NULL: never offloaded) are added matching the metadata, and a downgrade
drops exactly those two columns."""

from __future__ import annotations

from sqlalchemy import inspect
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head


async def columns(engine: AsyncEngine, table: str) -> set[str]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_columns(table))
    return {c["name"] for c in found}


async def test_0023_adds_the_offloaded_flag_and_the_offload_key(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    assert "offloaded" in await columns(engine, "usage_events")
    assert "offload_key_id" in await columns(engine, "batches")

    await downgrade_to(engine, "0022")
    assert "offloaded" not in await columns(engine, "usage_events")
    assert "offload_key_id" not in await columns(engine, "batches")
    assert "offload_batch_id" in await columns(engine, "batches")

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
