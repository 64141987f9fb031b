"""Mapping an offloaded batch's results into its items (SPEC §22) on real SQLite and Postgres: each item
ends once with one usage event however often — or however concurrently — its line is mapped, the
batch finishes when nothing is open, and neither a façade's cancel nor the expiry sweep touches the
items a provider runs (the poller forwards both)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches.expiry import expire_due
from relay.store import offload_batches as offload
from relay.store import tables as t
from relay.store.batch_queue import BatchStore, FinalItem
from tests.integration.batches.queue_helpers import (
    cancel_events,
    completed_at,
    events,
    item_event,
    items,
    submit,
)


async def offloaded(engine: AsyncEngine, n: int) -> str:
    batch_id = await submit(engine, n, api="anthropic", expires_at=datetime.now(UTC) + timedelta(hours=1))
    async with engine.begin() as conn:
        await offload.mark_offloaded(
            conn,
            batch_id,
            binding_id="bnd_1",
            provider_batch_id="msgbatch_1",
            state="in_progress",
            now=datetime.now(UTC),
        )
    return batch_id


def finals(batch_id: str, idxs: range) -> list[FinalItem]:
    return [
        FinalItem(
            batch_id, idx, "discarded", 400, "upstream returned 400: no", item_event(batch_id, idx, "no")
        )
        if idx % 2
        else FinalItem(batch_id, idx, "completed", 200, None, item_event(batch_id, idx))
        for idx in idxs
    ]


async def test_a_line_mapped_twice_or_concurrently_ends_its_item_once(
    engine: AsyncEngine, replica_engines: list[AsyncEngine]
) -> None:
    batch_id = await offloaded(engine, 6)
    store = BatchStore(engine)
    assert len(await store.settle_offloaded(batch_id, finals(batch_id, range(0, 2)))) == 2
    assert await store.settle_offloaded(batch_id, finals(batch_id, range(0, 2))) == []  # mapped again
    assert await completed_at(engine, batch_id) is None

    stores = [store, *(BatchStore(e) for e in replica_engines)]
    done = await asyncio.gather(
        *(s.settle_offloaded(batch_id, finals(batch_id, range(0, 6))) for s in stores)
    )
    assert sorted(f.idx for changed in done for f in changed) == [2, 3, 4, 5]  # each once
    assert [idx for idx, _ in await events(engine, batch_id)] == list(range(6))  # one event per item
    assert [row["state"] for row in await items(engine, batch_id)] == ["completed", "discarded"] * 3
    assert await completed_at(engine, batch_id) is not None
    assert await store.open_offloaded_idxs(batch_id, after_idx=-1, limit=10) == []


async def test_cancel_and_expiry_leave_a_providers_items_to_the_poller(engine: AsyncEngine) -> None:
    batch_id = await offloaded(engine, 3)
    store = BatchStore(engine)
    assert await store.cancel(batch_id, events_for=cancel_events(batch_id)) == []
    async with engine.begin() as conn:
        await conn.execute(
            update(t.batches)
            .where(t.batches.c.id == batch_id)
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=5))
        )
    assert await expire_due(store) == []
    assert [row["state"] for row in await items(engine, batch_id)] == ["available"] * 3
    assert await events(engine, batch_id) == []
    claimed = await offload.due_for_poll(
        engine, every_s=0, now=datetime.now(UTC) + timedelta(seconds=1), limit=5
    )
    assert [(b.id, b.cancel_requested) for b in claimed] == [(batch_id, True)]
    assert await store.open_offloaded_idxs(batch_id, after_idx=0, limit=10) == [1, 2]
