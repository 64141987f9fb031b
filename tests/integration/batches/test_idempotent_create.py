"""Idempotent creates on real SQLite and Postgres: concurrent duplicates, with each payload store, leave
one batch and no request bodies of the losers behind (``BatchService.create``); rows past the 24 h
window are purged by the expiry sweeper's loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batch_apis.idempotency import WINDOW, IdempotencyClaim, purge_expired
from relay.batches.expiry import ExpirySweeper
from relay.batches.new_batch import Answer, CreatedBatch, NewBatch
from relay.batches.service import BatchService
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.request.auth import Principal
from relay.snapshot import Policy
from relay.store import idempotency as store
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from relay.store.idempotency import StoredAnswer
from tests.integration.batches.queue_helpers import KEY_HASH

CONCURRENT = 6


@pytest.fixture
async def clean(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    async with engine.begin() as conn:
        await conn.execute(delete(t.payload_chunks))
    yield engine


def principal() -> Principal:
    return Principal(
        policy=Policy("pol_1", "default", (), (), "prioritized", (), False, True),
        project_id="prj_1",
        team_id="tm_1",
        principal_kind="serviceaccount",
        principal_id="sa_1",
        credential_kind="key",
        credential_id="rk_1",
        key_hash=KEY_HASH,
        owner=KEY_HASH,
        key_payload_logging=False,
    )


def render(batch: CreatedBatch) -> Answer:
    return Answer(202, batch.id.encode())


@pytest.mark.parametrize("store", ["database", "files"])
async def test_concurrent_duplicates_leave_one_batch_and_no_orphaned_bodies(
    clean: AsyncEngine, tmp_path: Path, store: str
) -> None:
    engine = clean
    root = tmp_path / "payloads"
    stores = PayloadStores(FileStore(root), DatabaseStore(engine), store)  # type: ignore[arg-type]
    service = BatchService(BatchStore(engine), stores, max_items=100)
    claim = IdempotencyClaim(KEY_HASH, "same-key", "f" * 64)
    new = NewBatch(api="relay", shape="openai", requests=[{"model": "m", "messages": []}] * 3)
    try:
        answers = await asyncio.gather(
            *(service.create(principal(), new, render, idempotency=claim) for _ in range(CONCURRENT))
        )
    finally:
        stores.close()
    assert len({a.body for a in answers}) == 1  # every caller got the first answer
    async with engine.connect() as conn:
        batch_ids = list((await conn.execute(select(t.batches.c.id))).scalars())
        owners = list(
            (
                await conn.execute(
                    select(t.payload_chunks.c.owner_id).where(t.payload_chunks.c.kind == "request").distinct()
                )
            ).scalars()
        )
        items = (await conn.execute(select(func.count()).select_from(t.batch_items))).scalar()
    assert batch_ids == [answers[0].body.decode()] and items == 3
    directories = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.exists() else []
    if store == "database":
        assert owners == batch_ids and directories == []
    else:
        assert owners == [] and directories == batch_ids


async def test_idempotency_rows_older_than_the_window_are_swept(engine: AsyncEngine) -> None:
    now = datetime.now(UTC)
    ages = {"fresh": timedelta(hours=1), "old-1": timedelta(hours=25), "old-2": timedelta(days=3)}
    async with engine.begin() as conn:
        for key, age in ages.items():
            stored = StoredAnswer("f" * 64, 202, b"{}")
            await store.record_answer(conn, KEY_HASH, key, stored, created_at=now - age, window=WINDOW)
    assert await purge_expired(engine, limit=1) == 1  # bounded: one statement, at most ``limit`` rows
    ran = asyncio.Event()

    async def housekeeping() -> None:
        await purge_expired(engine)
        ran.set()

    sweeper = ExpirySweeper(BatchStore(engine), 0.01, housekeeping=housekeeping)  # the sweeper's loop runs it
    await sweeper.start()
    try:
        await asyncio.wait_for(ran.wait(), 30)
    finally:
        await sweeper.stop()
    async with engine.connect() as conn:
        keys = list((await conn.execute(select(t.idempotency_keys.c.key))).scalars())
    assert keys == ["fresh"]


@pytest.mark.parametrize("store", ["database", "files"])
async def test_a_create_whose_insert_fails_otherwise_leaves_no_bodies(
    clean: AsyncEngine, tmp_path: Path, store: str
) -> None:
    root = tmp_path / "payloads"
    stores = PayloadStores(FileStore(root), DatabaseStore(clean), store)  # type: ignore[arg-type]
    service = BatchService(BatchStore(clean), stores, max_items=100)
    # Bodies are written, then the insert refuses the batch (one custom id for two items).
    new = NewBatch(api="openai", shape="openai", requests=[{"model": "m"}] * 2, custom_ids=["only-one"])
    try:
        with pytest.raises(ValueError, match="custom ids"):
            await service.create(principal(), new, render)
    finally:
        stores.close()
    async with clean.connect() as conn:
        chunks = (await conn.execute(select(func.count()).select_from(t.payload_chunks))).scalar()
        batches = (await conn.execute(select(func.count()).select_from(t.batches))).scalar()
    directories = [p for p in root.iterdir() if p.is_dir()] if root.exists() else []
    assert (chunks, batches, directories) == (0, 0, [])
