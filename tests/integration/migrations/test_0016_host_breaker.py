"""Migration 0016: ``hosts.breaker`` (SPEC §6 tuning) is added as a nullable JSON column, hosts written
before it keep their rows (NULL: the untuned breaker), and a downgrade drops only that column."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.breaker import DEFAULT_TUNING, BreakerTuning
from relay.snapshot.entities import Host
from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head


async def host_columns(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return {c["name"] for c in await conn.run_sync(lambda sync: inspect(sync).get_columns("hosts"))}


async def test_0016_adds_a_nullable_breaker_to_hosts(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0015")
    assert "breaker" not in await host_columns(engine)
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO hosts (id, name, created_at, updated_at, base_url, enabled) "
                "VALUES ('hst_old', 'old', :now, :now, 'https://api.example.com', true)"
            ),
            {"now": now},
        )

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    async with engine.connect() as conn:
        row = (await conn.execute(text("SELECT * FROM hosts"))).mappings().one()
    assert row["breaker"] is None
    assert Host.from_row(dict(row)).breaker is DEFAULT_TUNING  # written before: the untuned breaker
    tuned = {**row, "breaker": {"threshold": 3, "window_s": 30}}
    assert Host.from_row(tuned).breaker == BreakerTuning(3, 30.0, 60.0)

    await downgrade_to(engine, "0015")
    assert "breaker" not in await host_columns(engine)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM hosts"))).scalar_one() == 1
