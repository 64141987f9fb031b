"""Housekeeping of ``batch_workers``: a replica that died without a clean stop leaves a row, which is
deleted once it has been silent for the rescue window (``queue_ops.expire_workers``); live rows stay."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from tests.integration.batches import queue_ops


async def test_silent_worker_rows_expire_and_live_ones_stay(engine: AsyncEngine) -> None:
    for instance in ("dead", "alive"):
        await queue_ops.heartbeat(engine, instance)
    async with engine.begin() as conn:  # "dead" last heartbeated 901 s ago
        row = (await conn.execute(select(t.batch_workers.c.heartbeat_at))).first()
        assert row is not None
        await conn.execute(
            update(t.batch_workers)
            .where(t.batch_workers.c.instance_id == "dead")
            .values(heartbeat_at=row.heartbeat_at - timedelta(seconds=901))
        )
    assert await queue_ops.expire_workers(engine, 900) == 1
    async with engine.connect() as conn:
        left = (await conn.execute(select(t.batch_workers.c.instance_id))).scalars().all()
    assert left == ["alive"]
    assert await queue_ops.expire_workers(engine, 900) == 0
    await queue_ops.heartbeat(engine, "dead")  # a replica that was only cut off comes back
    async with engine.connect() as conn:
        assert len((await conn.execute(select(t.batch_workers.c.instance_id))).all()) == 2
