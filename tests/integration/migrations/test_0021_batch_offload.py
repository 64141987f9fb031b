"""Migration 0021 (SPEC §22): ``bindings.batch_offload`` and the batch's offload columns are added as
nullable columns, bindings and batches written before it keep their rows (NULL: never offload,
gateway-run), and a downgrade drops only those columns and the poller's index."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.batch_offload import NEVER, BatchOffload
from relay.snapshot.entities import Binding
from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head

OFFLOAD_COLUMNS = {
    "offload_binding_id",
    "offload_batch_id",
    "offload_state",
    "offload_polled_at",
    "offload_reason",
}


async def columns(engine: AsyncEngine, table: str) -> dict[str, bool]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_columns(table))
    return {c["name"]: c["nullable"] for c in found}


async def batch_indexes(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).get_indexes("batches"))
    return {i["name"] for i in found}


async def insert_old_rows(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO hosts (id, name, created_at, updated_at, base_url, enabled) "
                "VALUES ('hst_old', 'old', :now, :now, 'https://api.example.com', true)"
            ),
            {"now": now},
        )
        await conn.execute(
            text(
                "INSERT INTO models (id, name, created_at, updated_at, provider, enabled) "
                "VALUES ('mdl_old', 'old', :now, :now, 'openai', true)"
            ),
            {"now": now},
        )
        await conn.execute(
            text(
                "INSERT INTO bindings (id, name, created_at, updated_at, model_id, host_id, adapter, "
                "enabled) VALUES ('bnd_old', 'old', :now, :now, 'mdl_old', 'hst_old', 'openai', true)"
            ),
            {"now": now},
        )
        await conn.execute(
            text(
                "INSERT INTO batches (id, created_at, owner, key_hash, policy_id, policy_name, project_id, "
                "team_id, principal_kind, principal_id, credential_kind, credential_id, inbound_shape, "
                "status, total_items) VALUES ('b_old', :now, 'o', 'o', 'pol', 'p', 'prj', 'tm', "
                "'serviceaccount', 'sa', 'key', 'k', 'openai', 'queued', 1)"
            ),
            {"now": now},
        )


async def test_0021_adds_nullable_offload_columns(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0020")
    assert "batch_offload" not in await columns(engine, "bindings")
    assert not OFFLOAD_COLUMNS & set(await columns(engine, "batches"))
    await insert_old_rows(engine)

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    batch_columns = await columns(engine, "batches")
    assert all(batch_columns[name] is True for name in OFFLOAD_COLUMNS)
    assert "ix_batches_offloaded" in await batch_indexes(engine)
    async with engine.connect() as conn:
        binding = (await conn.execute(text("SELECT * FROM bindings"))).mappings().one()
        batch = (await conn.execute(text("SELECT * FROM batches"))).mappings().one()
    assert binding["batch_offload"] is None
    assert Binding.from_row(dict(binding)).offload is NEVER  # written before: never offloaded
    native = {**binding, "batch_offload": {"mode": "native", "min_items": 10}}
    assert Binding.from_row(native).offload == BatchOffload(mode="native", min_items=10, discount=0.5)
    assert all(batch[name] is None for name in OFFLOAD_COLUMNS)  # written before: gateway-run

    await downgrade_to(engine, "0020")
    assert "batch_offload" not in await columns(engine, "bindings")
    assert not OFFLOAD_COLUMNS & set(await columns(engine, "batches"))
    assert "ix_batches_offloaded" not in await batch_indexes(engine)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM batches"))).scalar_one() == 1
        assert (await conn.execute(text("SELECT count(*) FROM bindings"))).scalar_one() == 1
