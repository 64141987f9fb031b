"""Revision 0014 (fair share across projects, SPEC §17) adds ``batch_project_turns`` on both dialects,
and its downgrade removes it again without touching the batches."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.migrate import check_schema, current_revision, downgrade_to, upgrade_to_head


async def table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))


async def test_0014_adds_the_project_turns_and_its_downgrade_removes_them(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0014")
    assert "batch_project_turns" in await table_names(engine)
    turn = text("INSERT INTO batch_project_turns (project_id, last_claimed_at) VALUES ('prj_1', :at)")
    async with engine.begin() as conn:
        await conn.execute(turn, {"at": datetime.now(UTC)})
    with pytest.raises(IntegrityError):  # one turn per project
        async with engine.begin() as conn:
            await conn.execute(turn, {"at": datetime.now(UTC)})

    await downgrade_to(engine, "-1")  # relative: whatever 0014 follows
    assert await current_revision(engine) != "0014"
    assert "batch_project_turns" not in await table_names(engine)
    assert "batches" in await table_names(engine)

    await upgrade_to_head(engine)
    assert "batch_project_turns" in await table_names(engine)
    assert await check_schema(engine) == []
