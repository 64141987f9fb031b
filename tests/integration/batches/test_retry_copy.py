"""A retry batch's items and request bodies, copied by ``BatchRetries`` (SPEC §17 "Retry") on real SQLite
and Postgres, between every pair of payload stores: the original's store and the current one (a batch's
bodies stay where it was submitted, the retry's go to the store new batches use, SPEC §10.7). More
items than one copy page, so the paging is exercised; the original is never changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches.new_batch import NewBatch
from relay.batches.retry import COPY_PAGE, BatchRetries
from relay.batches.service import BatchService
from relay.domain.batch_retry import RetrySelection
from relay.errors import Unavailable
from relay.payloads.base import PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from relay.store.batch_queue._retry import _copy_chunks
from tests.integration.batches.test_idempotent_create import principal, render

N = COPY_PAGE * 2 + 7
PAIRS = [("files", "files"), ("files", "database"), ("database", "files"), ("database", "database")]


@pytest.fixture
async def clean(engine: AsyncEngine) -> AsyncIterator[AsyncEngine]:
    async with engine.begin() as conn:
        await conn.execute(delete(t.payload_chunks))
    yield engine


async def item_rows(engine: AsyncEngine, batch_id: str) -> list[tuple[object, ...]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(
                t.batch_items.c.idx, t.batch_items.c.state, t.batch_items.c.error, t.batch_items.c.source_idx
            )
            .where(t.batch_items.c.batch_id == batch_id)
            .order_by(t.batch_items.c.idx)
        )
        return [tuple(row) for row in rows]


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s}-to-{d}" for s, d in PAIRS])
async def test_bodies_cross_payload_stores_page_by_page(
    clean: AsyncEngine, tmp_path: Path, source: str, target: str
) -> None:
    root = tmp_path / "payloads"
    files, database = FileStore(root), DatabaseStore(clean)
    store = BatchStore(clean)
    submitted_under = BatchService(store, PayloadStores(files, database, source), max_items=N)  # type: ignore[arg-type]
    now = BatchService(store, PayloadStores(files, database, target), max_items=N)  # type: ignore[arg-type]
    try:
        bodies = [{"model": "m", "n": i, "pad": "x" * (i % 7)} for i in range(N)]
        answer = await submitted_under.create(principal(), NewBatch("relay", "openai", bodies), render)
        batch_id = answer.body.decode()
        record = await submitted_under.record(batch_id)
        await submitted_under.cancel_record(record)  # every item final: cancelled
        async with clean.begin() as conn:  # every third one discarded instead, as a failed run leaves it
            await conn.execute(
                update(t.batch_items)
                .where(t.batch_items.c.batch_id == batch_id, t.batch_items.c.idx % 3 == 0)
                .values(state="discarded", error="routing: unknown model")
            )
        before = await item_rows(clean, batch_id)

        retries = BatchRetries(now)
        chosen = {"errors": ["routing: "]}
        made = await retries.retry(principal(), batch_id, orjson.dumps(chosen))
        assert made.status_code == 202
        created = orjson.loads(made.body)
        expected = [i for i in range(N) if i % 3 == 0]
        assert created["total_items"] == len(expected) and created["retry_of"] == batch_id
        new = await now.record(created["id"])
        assert new.retry_of == batch_id and new.payload_store == target and new.api == "relay"
        rows = await item_rows(clean, new.id)
        assert [(r[0], r[1], r[3]) for r in rows] == [(k, "available", i) for k, i in enumerate(expected)]
        copied = await now.payloads.of(target).read_requests(new.id, list(range(len(expected))))
        assert [orjson.loads(copied[k]) for k in range(len(expected))] == [bodies[i] for i in expected]

        everything = orjson.loads((await retries.retry(principal(), batch_id, b"")).body)
        assert everything["total_items"] == N
        copied = await now.payloads.of(target).read_requests(everything["id"], list(range(N)))
        assert [orjson.loads(copied[k]) for k in range(N)] == bodies

        assert await item_rows(clean, batch_id) == before  # the original is never changed
        async with clean.connect() as conn:
            originals = await conn.execute(
                select(func.count()).select_from(t.batches).where(t.batches.c.retry_of.is_(None))
            )
            assert originals.scalar_one() == 1
    finally:
        files.close()


async def test_postgres_copies_chunks_by_primary_key_lookups(clean: AsyncEngine, tmp_path: Path) -> None:
    """The chunk copy's plan looks each item's chunks up by the whole key prefix (owner, kind, idx),
    whatever the planner guesses of rows it has no statistics for yet: a join filter comparing every
    item with every chunk made 10 000 items cost ~30 s."""
    if clean.dialect.name != "postgresql":
        pytest.skip("the LATERAL lookup is Postgres's plan; SQLite looks chunks up by key on its own")
    files = FileStore(tmp_path)
    service = BatchService(
        BatchStore(clean), PayloadStores(files, DatabaseStore(clean), "database"), max_items=50
    )
    try:
        answer = await service.create(
            principal(), NewBatch("relay", "openai", [{"n": i} for i in range(50)]), render
        )
        batch_id = answer.body.decode()
        statement = _copy_chunks("postgresql", batch_id, "b_new", RetrySelection(states=("available",)))
        compiled = statement.compile(dialect=clean.dialect, compile_kwargs={"literal_binds": True})
        async with clean.connect() as conn:
            plan = [row[0] for row in await conn.execute(text(f"EXPLAIN {compiled}"))]
    finally:
        files.close()
    assert not any("Join Filter" in step for step in plan), plan
    assert any("Index Cond" in step and "idx =" in step for step in plan), plan


@pytest.mark.parametrize("target", ["files", "database"])
async def test_bodies_this_replica_cannot_read_refuse_the_retry_and_write_nothing(
    clean: AsyncEngine, tmp_path: Path, target: str
) -> None:
    """SPEC §10.7: with an unshared payload directory the original's bodies may be missing here: a 503
    that says so, and no batch, item or body of the retry."""
    files, database = FileStore(tmp_path / "payloads"), DatabaseStore(clean)
    store = BatchStore(clean)
    submitted_under = BatchService(store, PayloadStores(files, database, "files"), max_items=10)  # type: ignore[arg-type]
    now = BatchService(store, PayloadStores(files, database, target), max_items=10)  # type: ignore[arg-type]
    try:
        answer = await submitted_under.create(
            principal(), NewBatch("relay", "openai", [{"n": 1}, {"n": 2}]), render
        )
        batch_id = answer.body.decode()
        await submitted_under.cancel_record(await submitted_under.record(batch_id))
        (tmp_path / "payloads" / batch_id / "requests.jsonl").unlink()
        with pytest.raises(Unavailable) as refused:
            await BatchRetries(now).retry(principal(), batch_id, b"")
        assert refused.value.status == 503 and refused.value.code == "payload_unavailable"
        assert "RELAY_BATCH_PAYLOAD_DIR" in refused.value.message
        async with clean.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(t.batches))).scalar_one() == 1
            assert (await conn.execute(select(func.count()).select_from(t.payload_chunks))).scalar_one() == 0
        assert sorted(p.name for p in (tmp_path / "payloads").iterdir()) == [batch_id]
    finally:
        files.close()
