"""Migration 0022: the ``guardrails`` table and a policy's ``policy_guardrails`` list (SPEC §20) are
created matching the metadata, and a downgrade drops exactly those two tables."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head
from tests.integration.migrations.helpers import tables


async def test_0022_creates_and_drops_the_guardrail_tables(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    assert {"guardrails", "policy_guardrails"} <= await tables(engine)

    await downgrade_to(engine, "0021")
    left = await tables(engine)
    assert "guardrails" not in left and "policy_guardrails" not in left
    assert "policies" in left

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
