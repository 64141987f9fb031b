"""Migration 0020: ``batches.trace_parent`` (SPEC §18: a batch's trace context) is added as a nullable
column, batches written before it keep their rows (NULL: their items are not traced), and a downgrade
drops only that column."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.batch_queue import record_from_row
from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head


async def batch_columns(engine: AsyncEngine) -> dict[str, bool]:
    async with engine.connect() as conn:
        columns = await conn.run_sync(lambda sync: inspect(sync).get_columns("batches"))
    return {c["name"]: c["nullable"] for c in columns}


async def test_0020_adds_a_nullable_trace_parent_to_batches(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0019")
    assert "trace_parent" not in await batch_columns(engine)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO batches (id, created_at, owner, key_hash, policy_id, policy_name, project_id, "
                "team_id, principal_kind, principal_id, credential_kind, credential_id, inbound_shape, "
                "status, total_items) VALUES ('b_old', :now, 'o', 'o', 'pol', 'p', 'prj', 'tm', "
                "'serviceaccount', 'sa', 'key', 'k', 'openai', 'queued', 1)"
            ),
            {"now": datetime.now(UTC)},
        )

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    assert (await batch_columns(engine))["trace_parent"] is True
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM batches"))).mappings().one()
    assert record_from_row(row).trace_parent is None  # written before: its items are not traced

    await downgrade_to(engine, "0019")
    assert "trace_parent" not in await batch_columns(engine)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM batches"))).scalar_one() == 1
