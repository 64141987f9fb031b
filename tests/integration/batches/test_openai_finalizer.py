"""The OpenAI Batches façade's finalizing on real SQLite and Postgres (SPEC §14): the finish hook marks a
finished §14 batch ``finalizing`` inside the finishing transaction; replicas racing to finalize it write
its files exactly once; a lapsed claim (a dead replica's) is taken over, a live one is left alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batch_apis.files_service import FileService
from relay.batch_apis.openai_finalizer import NO_END_EVENTS, EndEvents, OpenAIFinalizer, finalizing_hook
from relay.batches.hooks import FinishHooks
from relay.batches.service import BatchService
from relay.domain.batches import mint_batch_id
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.store import batches as batch_store
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import KEY_HASH, batch_row, cancel_events


@pytest.fixture
async def hooked(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    async with engine.begin() as conn:
        await conn.execute(delete(t.files))
        await conn.execute(delete(t.payload_chunks))
    yield engine


HOOKS = FinishHooks(finalizing_hook())  # what relay.boot builds, without the webhooks' outbox


def finalizer(engine: AsyncEngine, tmp_path: Path, end_events: EndEvents = NO_END_EVENTS) -> OpenAIFinalizer:
    stores = PayloadStores(FileStore(tmp_path / "payloads"), DatabaseStore(engine), "database")
    batches = BatchService(BatchStore(engine), stores, max_items=100)
    files = FileService(engine, stores, max_bytes=10_000)
    return OpenAIFinalizer(engine, batches, files, interval_s=3600, end_events=end_events)


async def cancelled_openai_batch(engine: AsyncEngine, items: int = 3, hooks: FinishHooks = HOOKS) -> str:
    batch_id = mint_batch_id("openai")
    row = batch_row(
        id=batch_id, api="openai", api_status="in_progress", api_data={"endpoint": "/v1/chat/completions"}
    )
    await queue_ops.insert_batch(engine, row, items, custom_ids=[f"c{i}" for i in range(items)], hooks=hooks)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id), hooks=hooks)
    return batch_id


async def state(engine: AsyncEngine, batch_id: str) -> tuple[Any, dict[str, Any]]:
    async with engine.connect() as conn:
        row = await batch_store.get_batch(conn, batch_id)
    assert row is not None
    return row["api_status"], row["api_data"] or {}


async def error_files(engine: AsyncEngine, batch_id: str) -> int:
    async with engine.connect() as conn:
        query = (
            select(func.count()).select_from(t.files).where(t.files.c.filename == f"{batch_id}_error.jsonl")
        )
        return int((await conn.execute(query)).scalar_one())


async def test_racing_replicas_write_the_files_once(
    hooked: AsyncEngine, replica_engines: list[AsyncEngine], tmp_path: Path
) -> None:
    batch_id = await cancelled_openai_batch(hooked)
    assert (await state(hooked, batch_id))[0] == "finalizing"  # set inside the finishing transaction
    racers = [finalizer(engine, tmp_path / str(i)) for i, engine in enumerate(replica_engines)]
    done = await asyncio.gather(*(racer.finalize_waiting() for racer in racers))
    assert sum(done) == 1
    status, data = await state(hooked, batch_id)
    assert status == "cancelled" and data["error_file_id"] and "output_file_id" not in data
    assert await error_files(hooked, batch_id) == 1
    assert sum(await asyncio.gather(*(racer.finalize_waiting() for racer in racers))) == 0  # nothing left
    content = FileService(
        hooked, PayloadStores(FileStore(tmp_path), DatabaseStore(hooked), "database"), max_bytes=1
    )
    lines = [line async for line in await content.lines(KEY_HASH, data["error_file_id"])]
    assert [line.count(b'"batch_cancelled"') for line in lines] == [1, 1, 1]


async def test_a_lapsed_claim_is_taken_over_and_a_live_one_left_alone(
    hooked: AsyncEngine, tmp_path: Path
) -> None:
    lapsed, live = await cancelled_openai_batch(hooked), await cancelled_openai_batch(hooked)
    async with hooked.begin() as conn:
        await conn.execute(update(t.batches).where(t.batches.c.id == lapsed).values(api_status="fin@1"))
        await conn.execute(
            update(t.batches).where(t.batches.c.id == live).values(api_status="fin@9999999999")
        )
    assert await finalizer(hooked, tmp_path).finalize_waiting() == 1
    assert (await state(hooked, lapsed))[0] == "cancelled" and await error_files(hooked, lapsed) == 1
    assert (await state(hooked, live))[0] == "fin@9999999999" and await error_files(hooked, live) == 0


async def test_the_hook_leaves_other_apis_and_failed_batches_alone(hooked: AsyncEngine) -> None:
    relay = batch_row()
    await queue_ops.insert_batch(hooked, relay, 1, hooks=HOOKS)
    await queue_ops.cancel(hooked, relay["id"], events_for=cancel_events(relay["id"]), hooks=HOOKS)
    failed_id = mint_batch_id("openai")
    row = batch_row(id=failed_id, api="openai", api_status="failed")
    await queue_ops.insert_batch(hooked, row, 0, hooks=HOOKS)
    assert (await state(hooked, relay["id"]))[0] is None
    assert (await state(hooked, failed_id))[0] == "failed"


async def test_the_end_event_is_called_once_in_the_end_state_transaction(
    hooked: AsyncEngine, replica_engines: list[AsyncEngine], tmp_path: Path
) -> None:
    """What the webhooks' outbox gets (SPEC §10.10): one call per batch with its end state's event type,
    inside the transaction that sets it (the callback's row write commits with it), for a finalized
    batch and for one that failed validation (finished at create)."""
    calls: list[tuple[str, str, dict[str, int]]] = []

    async def record(
        conn: Any, *, batch_id: str, api: str, project_id: str, counts: Any, event_type: str
    ) -> int:
        assert (api, project_id) == ("openai", "prj_1")
        calls.append((batch_id, event_type, dict(counts)))
        await batch_store.set_api_state(conn, batch_id, api_data={"seen_in_transaction": True})
        return 1

    end_events = EndEvents(record)  # passed explicitly, as relay.boot does: no registry
    hooks = FinishHooks(finalizing_hook(end_events))
    batch_id = await cancelled_openai_batch(hooked, hooks=hooks)
    racers = [finalizer(engine, tmp_path / str(i), end_events) for i, engine in enumerate(replica_engines)]
    await asyncio.gather(*(racer.finalize_waiting() for racer in racers))
    failed_id = mint_batch_id("openai")
    row = batch_row(id=failed_id, api="openai", api_status="failed")
    await queue_ops.insert_batch(hooked, row, 0, hooks=hooks)
    assert calls == [(batch_id, "batch.cancelled", {"cancelled": 3}), (failed_id, "batch.failed", {})]
    assert (await state(hooked, batch_id))[1] == {"seen_in_transaction": True}
    assert (await state(hooked, failed_id))[1] == {"seen_in_transaction": True}
