"""The payload store contract (relay.payloads.base, SPEC §10.7): ONE suite run against both
implementations — ``files`` (relay.payloads.files: a real directory) and ``database``
(relay.payloads.database: real SQLite and Postgres) — with the database store's chunks made small, so
multi-chunk bodies are exercised without 200 MB of data. The Files API's bytes through both stores are
test_file_service.py's, beside this one."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.ids import mint_id
from relay.payloads.base import PREFETCH_BYTES, KeptResponse, PayloadStore, PayloadStores
from relay.payloads.database import DatabaseStore
from relay.payloads.files import FileStore
from relay.store import tables as t

CHUNK = 1000  # the database store's chunk size in this suite
BODIES = [b"{}", b"", '{"text": "h\u00e9llo \u2603"}'.encode(), b"x" * (3 * CHUNK + 7), b"y" * CHUNK]


@pytest.fixture(params=["files", "database"])
async def store(
    request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[PayloadStore]:
    async with engine.begin() as conn:
        await conn.execute(delete(t.payload_chunks))
    made: PayloadStore = (
        FileStore(tmp_path / "payloads")
        if request.param == "files"
        else DatabaseStore(engine, chunk_bytes=CHUNK)
    )
    try:
        yield made
    finally:
        made.close()


def twin(store: PayloadStore, engine: AsyncEngine) -> PayloadStore:
    """Another replica's store with the same configuration (the same directory or database)."""
    if isinstance(store, FileStore):
        return FileStore(store.dir.root)
    return DatabaseStore(engine, chunk_bytes=CHUNK)


async def keep_and_save(
    store: PayloadStore, engine: AsyncEngine, batch_id: str, bodies: dict[int, bytes]
) -> dict[int, KeptResponse]:
    """What a worker does for completed items: keep while running, flush, save in the final transaction."""
    kept = {idx: store.keep_response(batch_id, idx, body) for idx, body in bodies.items()}
    await store.flush()
    async with engine.begin() as conn:
        await store.save_responses(conn, [(batch_id, idx, k) for idx, k in kept.items()])
    return kept


async def test_requests_read_back_exactly_and_by_any_replica(
    store: PayloadStore, engine: AsyncEngine
) -> None:
    batch_id = mint_id("b")
    assert await store.write_requests(batch_id, iter(BODIES)) == len(BODIES)
    for idx, body in enumerate(BODIES):
        assert await store.read_request(batch_id, idx) == body
    other = twin(store, engine)
    assert [await other.read_request(batch_id, i) for i in range(len(BODIES))] == BODIES


async def test_concurrent_reads_of_several_batches(store: PayloadStore) -> None:
    """Items of a started group read at once (the database store answers them with one query)."""
    first, second = mint_id("b"), mint_id("b")
    await store.write_requests(first, iter(BODIES))
    await store.write_requests(second, (b"%d" % i for i in range(3)))
    wanted = [(first, i) for i in range(len(BODIES))] + [(second, i) for i in (2, 0, 1)]
    got = await asyncio.gather(*(store.read_request(b, i) for b, i in wanted))
    assert got == [*BODIES, b"2", b"0", b"1"]
    missing = await asyncio.gather(
        store.read_request(first, 0), store.read_request(second, 9), return_exceptions=True
    )
    assert missing[0] == BODIES[0] and isinstance(missing[1], FileNotFoundError)


async def test_a_missing_request_is_file_not_found(store: PayloadStore) -> None:
    batch_id = mint_id("b")
    await store.write_requests(batch_id, iter([b"{}"]))
    for missing_batch, idx in ((batch_id, 1), (mint_id("b"), 0)):
        with pytest.raises(FileNotFoundError):
            await store.read_request(missing_batch, idx)


async def test_a_group_of_requests_reads_back_in_one_call(store: PayloadStore) -> None:
    """``read_requests`` (a retry copying bodies, SPEC §17): any subset, multi-chunk and empty bodies
    whole; one missing body is ``FileNotFoundError``, not a partial answer."""
    batch_id = mint_id("b")
    await store.write_requests(batch_id, iter(BODIES))
    assert await store.read_requests(batch_id, [4, 1, 3]) == {4: BODIES[4], 1: BODIES[1], 3: BODIES[3]}
    assert await store.read_requests(batch_id, list(range(len(BODIES)))) == dict(enumerate(BODIES))
    for missing_batch, idxs in ((batch_id, [0, len(BODIES)]), (mint_id("b"), [0])):
        with pytest.raises(FileNotFoundError):
            await store.read_requests(missing_batch, idxs)


async def test_a_failing_submission_writes_no_request(store: PayloadStore) -> None:
    batch_id = mint_id("b")

    def bodies() -> Iterator[bytes]:
        yield b'{"a": 1}'
        raise ValueError("item 1 cannot be serialised")

    with pytest.raises(ValueError, match="item 1"):
        await store.write_requests(batch_id, bodies())
    with pytest.raises(FileNotFoundError):
        await store.read_request(batch_id, 0)


async def test_many_requests_in_order(store: PayloadStore) -> None:
    """More bodies than one insert group (5 000 rows), each its own idx."""
    batch_id = mint_id("b")
    n = 12_345
    assert await store.write_requests(batch_id, (b'{"i": %d}' % i for i in range(n))) == n
    for idx in (0, 4_999, 5_000, 10_001, n - 1):
        assert await store.read_request(batch_id, idx) == b'{"i": %d}' % idx


async def test_responses_read_back_by_idx_from_any_replica(store: PayloadStore, engine: AsyncEngine) -> None:
    batch_id = mint_id("b")
    await store.write_requests(batch_id, iter([b"{}"] * 4))
    bodies = {0: b'{"ok": true}', 2: b"z" * (2 * CHUNK + 1), 3: b""}
    kept = await keep_and_save(store, engine, batch_id, bodies)
    refs = {idx: k.ref for idx, k in kept.items()}
    assert await store.read_responses(batch_id, refs) == bodies
    assert await twin(store, engine).read_responses(batch_id, refs) == bodies
    assert await store.read_responses(batch_id, {}) == {}


async def test_a_response_whose_transaction_rolled_back_is_not_read(
    store: PayloadStore, engine: AsyncEngine
) -> None:
    """A body is read through what its item's final transaction recorded: none, when it rolled back."""
    batch_id = mint_id("b")
    await store.write_requests(batch_id, iter(BODIES))  # a batch's responses follow its requests
    kept = store.keep_response(batch_id, 0, b'{"lost": true}')
    await store.flush()
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await store.save_responses(conn, [(batch_id, 0, kept)])
            raise RuntimeError("the finalize failed")
    # The row would have recorded ``kept.ref`` (files) or nothing (database): it recorded nothing.
    assert await store.read_responses(batch_id, {0: None}) == {0: None}


async def test_the_database_store_writes_nothing_to_disk_and_chunks_big_bodies(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """With ``database`` current, a batch's bodies are rows (several per big body) and the payload
    directory is never created."""
    payload_dir = tmp_path / "never"
    stores = PayloadStores(FileStore(payload_dir), DatabaseStore(engine, chunk_bytes=CHUNK), "database")
    batch_id = mint_id("b")
    assert stores.current.name == "database" and stores.of("files").name == "files"
    await stores.current.write_requests(batch_id, iter([b"a" * (5 * CHUNK)]))
    kept = stores.current.keep_response(batch_id, 0, b"b" * (2 * CHUNK))
    await stores.flush()
    async with engine.begin() as conn:
        await stores.save_responses(conn, [("database", batch_id, 0, kept)])
    async with engine.connect() as conn:
        count = select(func.count()).where(t.payload_chunks.c.owner_id == batch_id)
        assert (await conn.execute(count)).scalar_one() == 5 + 2
    assert await stores.of("database").read_responses(batch_id, {0: None}) == {0: b"b" * (2 * CHUNK)}
    assert not os.path.exists(payload_dir)  # noqa: ASYNC240  (a test check, not I/O on a hot path)
    stores.close()


async def test_files_stream_in_and_out_and_leave_nothing_when_discarded_or_removed(
    store: PayloadStore, engine: AsyncEngine, tmp_path: Path
) -> None:
    """The Files API's calls (SPEC §14): bytes written in pieces of any size read back exactly, in
    chunks; a discarded file and a removed one leave neither rows nor files; a missing file on the
    ``files`` store raises ``FileNotFoundError``, on the ``database`` store reads as nothing."""
    body = os.urandom(5 * CHUNK + 123)
    file_id = "file-" + mint_id("f")[2:]
    sink = await store.open_file(file_id)
    for start in range(0, len(body), 700):
        await sink.write(body[start : start + 700])
    await sink.commit()
    chunks = [chunk async for chunk in store.read_file(file_id)]
    assert b"".join(chunks) == body
    assert [chunk async for chunk in twin(store, engine).read_file(file_id)] == chunks  # any replica
    if isinstance(store, FileStore):
        assert (tmp_path / "payloads" / "files" / file_id).stat().st_mode & 0o777 == 0o600
    await store.remove_file(file_id)
    await store.remove_file(file_id)  # removing twice is fine
    dropped = "file-" + mint_id("f")[2:]
    sink = await store.open_file(dropped)
    await sink.write(b"x" * (2 * CHUNK + 1))
    await sink.discard()
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(t.payload_chunks))).scalar() == 0
    files_dir = tmp_path / "payloads" / "files"
    assert not files_dir.exists() or list(files_dir.iterdir()) == []
    if isinstance(store, FileStore):
        assert files_dir.stat().st_mode & 0o777 == 0o700
        with pytest.raises(FileNotFoundError):
            [chunk async for chunk in store.read_file(file_id)]
    else:
        assert [chunk async for chunk in store.read_file(file_id)] == []


async def test_claimed_requests_read_ahead_are_the_small_whole_bodies(store: PayloadStore) -> None:
    """``prefetch_requests`` reads a claim's bodies in one query (database) or one thread hop (files),
    giving back exactly the bodies it can give whole — the file store every one up to
    ``PREFETCH_BYTES``, the database store those that are one chunk — and ``None`` for the others
    (multi-chunk or missing), which ``read_request`` still reads whole."""
    batch_id = mint_id("b")
    await store.write_requests(batch_id, iter(BODIES))
    idxs = [*range(len(BODIES)), 99]
    ahead = store.prefetch_requests(batch_id, idxs)
    assert sorted(ahead) == idxs
    got = {idx: await future for idx, future in ahead.items()}
    multi_chunk = 3  # 3 × CHUNK + 7 bytes: four chunks in the database
    expected: dict[int, bytes | None] = {**dict(enumerate(BODIES)), 99: None}
    if isinstance(store, DatabaseStore):
        expected[multi_chunk] = None
    assert got == expected
    assert await store.read_request(batch_id, multi_chunk) == BODIES[multi_chunk]
    assert await store.prefetch_requests(mint_id("b"), [0])[0] is None  # an unknown batch: read later


@pytest.mark.parametrize("kind", ["files", "database"])
async def test_a_request_over_the_read_ahead_size_is_read_when_it_runs(
    kind: str, engine: AsyncEngine, tmp_path: Path
) -> None:
    async with engine.begin() as conn:
        await conn.execute(delete(t.payload_chunks))
    # The database store with the shipped chunk size (1 MiB): this body is one chunk.
    store: PayloadStore = FileStore(tmp_path) if kind == "files" else DatabaseStore(engine)
    batch_id = mint_id("b")
    big = b"z" * (PREFETCH_BYTES + 1)
    await store.write_requests(batch_id, iter([b"{}", big]))
    ahead = store.prefetch_requests(batch_id, [0, 1])
    assert [await ahead[0], await ahead[1]] == [b"{}", None]
    assert await store.read_request(batch_id, 1) == big
    store.close()


async def test_a_claim_read_ahead_while_the_previous_one_finishes_is_answered(store: PayloadStore) -> None:
    """A group queued just as the read-ahead task finished the previous one (its answer is out, its
    connection still closing) is read too: no item waits for ever for its body."""
    batch_id = mint_id("b")
    await store.write_requests(batch_id, iter(BODIES))
    first = store.prefetch_requests(batch_id, [0])
    assert await first[0] == BODIES[0]
    second = store.prefetch_requests(batch_id, [1, 2])  # the first task is closing its connection
    assert [await asyncio.wait_for(second[i], 10) for i in (1, 2)] == [BODIES[1], BODIES[2]]


async def test_removing_a_deleted_batch_takes_its_directory_and_nothing_else(
    tmp_path: Path, engine: AsyncEngine
) -> None:
    """The files store's ``remove_batch`` (a deleted §15 batch): that batch's requests and responses go,
    even while its responses file is open for appending; another batch's stay readable and appendable."""
    store = FileStore(tmp_path / "payloads")
    try:
        gone, kept = mint_id("msgbatch"), mint_id("msgbatch")
        for batch_id in (gone, kept):
            await store.write_requests(batch_id, iter(BODIES))
        refs = {idx: k.ref for idx, k in (await keep_and_save(store, engine, gone, {0: b"a"})).items()}
        kept_refs = {idx: k.ref for idx, k in (await keep_and_save(store, engine, kept, {0: b"b"})).items()}
        await store.remove_batch(gone)
        assert not (store.dir.root / gone).exists()
        with pytest.raises(FileNotFoundError):
            await store.read_request(gone, 0)
        assert await store.read_responses(gone, refs) == {0: None}
        assert [await store.read_request(kept, i) for i in range(len(BODIES))] == BODIES
        more = {idx: k.ref for idx, k in (await keep_and_save(store, engine, kept, {1: b"c"})).items()}
        assert await store.read_responses(kept, {**kept_refs, **more}) == {0: b"b", 1: b"c"}
        await store.remove_batch(gone)  # again: nothing left, nothing raised
        with pytest.raises(FileNotFoundError):  # a late item of the removed batch cannot recreate it
            store.keep_response(gone, 2, b"late")
        assert not (store.dir.root / gone).exists()
    finally:
        store.close()
