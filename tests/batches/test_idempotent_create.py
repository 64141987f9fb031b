"""Concurrent duplicate idempotent creates on real SQLite and Postgres, with each payload store: one
batch, and no request bodies of the losers left behind (``BatchService.create``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.auth import Principal
from relay.batches.idempotency import Answer, IdempotencyClaim
from relay.batches.payload_store import DatabaseStore, FileStore, PayloadStores
from relay.batches.service import BatchService, CreatedBatch, NewBatch
from relay.snapshot import Policy
from relay.store import tables as t
from tests.batches.test_queue import KEY_HASH

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
    service = BatchService(engine, stores, max_items=100)
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
