"""Helpers of the batch store tests (``tests/integration/batches/test_queue_*.py`` and the engine tests
that build on them): batch rows, usage events, one-item finalize, and reads of the raw rows.

Replicas are simulated by several engines on one database (each its own connection pool), claiming,
finishing and rescuing concurrently with ``asyncio.gather``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches.hooks import NO_HOOKS, FinishHooks
from relay.domain.batch_record import BatchRecord
from relay.domain.ids import mint_id
from relay.store import tables as t
from relay.store.batch_queue import ClaimedItem, RescuedItem
from relay.usage.event import UsageEvent
from tests.integration.batches import queue_ops

KEY_HASH = "ab" * 32


def batch_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": mint_id("b"),
        "created_at": datetime.now(UTC),
        "owner": KEY_HASH,
        "key_hash": KEY_HASH,
        "token_claims": None,
        "policy_id": "pol_1",
        "policy_name": "default",
        "project_id": "prj_1",
        "team_id": "tm_1",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_1",
        "credential_kind": "key",
        "credential_id": "rk_1",
        "inbound_shape": "openai",
    }
    row.update(overrides)
    return row


async def submit(engine: AsyncEngine, items: int, **overrides: Any) -> str:
    row = batch_row(**overrides)
    await queue_ops.insert_batch(engine, row, items)
    return str(row["id"])


def item_event(batch_id: str, idx: int, error: str | None = None) -> UsageEvent:
    return UsageEvent(
        id=mint_id("ue"),
        ts=datetime.now(UTC),
        request_id=f"req_{batch_id}_{idx}",
        source="batch",
        status=0 if error else 200,
        inbound_shape="openai",
        latency_ms=1,
        policy_id="pol_1",
        project_id="prj_1",
        team_id="tm_1",
        principal_kind="serviceaccount",
        principal_id="sa_1",
        credential_kind="key",
        credential_id="rk_1",
        batch_id=batch_id,
        batch_idx=idx,
        error_kind="cancelled" if error == "cancelled" else ("worker_lost" if error else None),
        error_message=error,
    )


def cancel_events(batch_id: str) -> Any:
    return lambda idxs: [item_event(batch_id, idx, "cancelled") for idx in idxs]


def rescue_events(items: list[RescuedItem]) -> list[UsageEvent]:
    return [item_event(item.batch_id, item.idx, item.error) for item in items]


def put_back_events(pairs: list[tuple[BatchRecord, int]]) -> list[UsageEvent]:
    return [item_event(record.id, idx, "cancelled") for record, idx in pairs]


async def finalize(
    engine: AsyncEngine,
    instance: str,
    batch_id: str,
    idx: int,
    *,
    state: Any,
    status: int | None,
    error: str | None,
    event: UsageEvent,
    hooks: FinishHooks = NO_HOOKS,
) -> bool:
    """``queue_ops.finalize_many`` for one item: True when it was this replica's to finish."""
    final = queue_ops.FinalItem(batch_id, idx, state, status, error, event)
    return bool(await queue_ops.finalize_many(engine, instance, [final], hooks=hooks))


async def complete(
    engine: AsyncEngine, instance: str, item: ClaimedItem, hooks: FinishHooks = NO_HOOKS
) -> bool:
    return await finalize(
        engine,
        instance,
        item.batch_id,
        item.idx,
        state="completed",
        status=200,
        error=None,
        event=item_event(item.batch_id, item.idx),
        hooks=hooks,
    )


async def items(engine: AsyncEngine, batch_id: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(t.batch_items).where(t.batch_items.c.batch_id == batch_id).order_by(t.batch_items.c.idx)
        )
        return [dict(row._mapping) for row in rows]


async def events(engine: AsyncEngine, batch_id: str) -> list[tuple[int, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(t.usage_events.c.batch_idx, t.usage_events.c.error_message)
            .where(t.usage_events.c.batch_id == batch_id)
            .order_by(t.usage_events.c.batch_idx)
        )
        return [(idx, error) for idx, error in rows]


async def completed_at(engine: AsyncEngine, batch_id: str) -> datetime | None:
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None
    return record.completed_at


async def available(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).where(t.batch_items.c.state == "available")
        return int((await conn.execute(query)).scalar_one())


async def set_back(engine: AsyncEngine, table: Any, column: str, seconds: float) -> None:
    """Move a timestamp column of every row into the past (what a dead replica's rows look like)."""
    async with engine.begin() as conn:
        rows = (await conn.execute(select(table))).all()
        for row in rows:
            key = {c.name: row._mapping[c.name] for c in table.primary_key.columns}
            when = row._mapping[column]
            if when is not None:
                where = [table.c[name] == value for name, value in key.items()]
                await conn.execute(
                    update(table).where(*where).values({column: when - timedelta(seconds=seconds)})
                )


async def claim_run(engine: AsyncEngine, instance_id: str, limit: int) -> list[queue_ops.ClaimedItem]:
    """Claim (reserve) and start at once: what a worker pool does for items it runs."""
    claimed = await queue_ops.claim(engine, instance_id, limit)
    started = await queue_ops.start(engine, instance_id, [(c.batch_id, c.idx) for c in claimed])
    assert started == {(c.batch_id, c.idx) for c in claimed}
    return claimed
