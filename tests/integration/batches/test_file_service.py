"""The Files API's service and the payload store's file calls (relay.batch_apis.files_service, SPEC §14):
one suite
on both stores (a real directory; real SQLite and Postgres with small chunks, so files span many
rows), covering what the OpenAI Batches façade uses — reading a file line by line and writing a
``batch_output`` file from lines — plus the limit, abort, expiry and sweep rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batch_apis.files_service import FileService
from relay.errors import NotFound, PayloadTooLarge
from relay.payloads.base import FileStore, PayloadStores
from relay.payloads.database import DatabaseStore
from relay.store import tables as t

CHUNK = 1000


@pytest.fixture(params=["files", "database"])
async def service(
    request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path
) -> AsyncIterator[FileService]:
    async with engine.begin() as conn:
        await conn.execute(delete(t.files))
        await conn.execute(delete(t.payload_chunks))
    stores = PayloadStores(
        FileStore(tmp_path / "payloads"), DatabaseStore(engine, chunk_bytes=CHUNK), request.param
    )
    yield FileService(engine, stores, max_bytes=10 * CHUNK)
    stores.close()


async def stored_bytes(engine: AsyncEngine, tmp_path: Path) -> tuple[int, list[str]]:
    async with engine.connect() as conn:
        chunks = (await conn.execute(select(func.count()).select_from(t.payload_chunks))).scalar()
    directory = tmp_path / "payloads" / "files"
    return int(chunks or 0), sorted(p.name for p in directory.iterdir()) if directory.exists() else []


async def read_all(service: FileService, owner: str, file_id: str) -> bytes:
    _, chunks = await service.content(owner, file_id)
    return b"".join([chunk async for chunk in chunks])


async def test_an_output_file_from_lines_reads_back_line_by_line(service: FileService) -> None:
    lines = [b'{"n": %d, "pad": "%s"}' % (i, b"p" * (i * 97 % 700)) for i in range(40)]

    async def produce() -> AsyncIterator[bytes]:
        for line in lines:
            yield line

    expires = datetime(2030, 1, 1, tzinfo=UTC)
    made = await service.create_output(
        "owner-a", produce(), filename="batch_x_output.jsonl", expires_at=expires
    )
    assert made["purpose"] == "batch_output" and made["filename"] == "batch_x_output.jsonl"
    assert made["bytes"] == sum(len(line) + 1 for line in lines) > 5 * CHUNK  # beyond the upload limit
    assert made["expires_at"] == int(expires.timestamp()) and made["status"] == "processed"
    assert [line async for line in await service.lines("owner-a", made["id"])] == lines
    assert await read_all(service, "owner-a", made["id"]) == b"".join(line + b"\n" for line in lines)
    with pytest.raises(NotFound):
        await service.lines("owner-b", made["id"])  # another owner's file is unknown to them
    plain = await service.create_output("owner-a", [b"one\n", b"two"], filename="e.jsonl")
    assert [line async for line in await service.lines("owner-a", plain["id"])] == [b"one", b"two"]
    assert plain["expires_at"] is None
    later = await service.create_output("owner-a", [b"x"], filename="l.jsonl", expires_after_s=7200)
    assert later["expires_at"] == later["created_at"] + 7200


async def test_uploads_past_the_limit_and_aborted_ones_leave_nothing(
    service: FileService, engine: AsyncEngine, tmp_path: Path
) -> None:
    before = await stored_bytes(engine, tmp_path)
    upload = await service.begin_upload("owner-a")
    await upload.write(b"x" * (6 * CHUNK))
    with pytest.raises(PayloadTooLarge):
        await upload.write(b"x" * (4 * CHUNK + 1))
    await upload.abort()
    aborted = await service.begin_upload("owner-a")
    await aborted.write(b"y" * (3 * CHUNK + 5))
    await aborted.abort()
    assert (await service.list("owner-a", purpose=None, after=None, order="desc", limit=10)).files == []
    assert await stored_bytes(engine, tmp_path) == before
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(t.files))).scalar() == 0
    whole = await service.begin_upload("owner-a")
    await whole.write(b"z" * (10 * CHUNK))  # exactly the limit
    row = await whole.finish(purpose="batch", filename="z.jsonl", expires_after_s=3600)
    assert row.bytes == 10 * CHUNK and row.expires_at == row.created_at + timedelta(seconds=3600)
    assert await read_all(service, "owner-a", row.id) == b"z" * (10 * CHUNK)


async def test_an_unfinished_upload_is_invisible(service: FileService) -> None:
    upload = await service.begin_upload("owner-a")
    await upload.write(b"partial")
    with pytest.raises(NotFound):
        await service.get("owner-a", upload.row.id)
    assert (await service.list("owner-a", purpose=None, after=None, order="asc", limit=10)).files == []
    await upload.abort()


async def test_the_sweep_removes_expired_files_and_abandoned_uploads(
    service: FileService, engine: AsyncEngine, tmp_path: Path
) -> None:
    empty = await stored_bytes(engine, tmp_path)
    kept = await service.create_output("o", [b"keep"], filename="k")
    expired = await service.create_output("o", [b"old"] * 2000, filename="x")
    abandoned = await service.begin_upload("o")
    await abandoned.write(b"a" * (3 * CHUNK))
    past = datetime.now(UTC) - timedelta(seconds=1)
    async with engine.begin() as conn:
        await conn.execute(update(t.files).where(t.files.c.id == expired["id"]).values(expires_at=past))
        await conn.execute(
            update(t.files)
            .where(t.files.c.id == abandoned.row.id)
            .values(created_at=past - timedelta(days=1))
        )
    assert await service.sweep() == 2
    with pytest.raises(NotFound):
        await service.get("o", expired["id"])
    assert await read_all(service, "o", kept["id"]) == b"keep\n"
    await service.delete("o", kept["id"])
    assert await stored_bytes(engine, tmp_path) == empty  # the partial bytes went with the upload's row
    assert await service.sweep() == 0
    await abandoned.abort()  # closes what a dead writer would have left open; nothing else to remove


async def test_an_expired_file_met_by_a_request_is_removed_there(
    service: FileService, engine: AsyncEngine, tmp_path: Path
) -> None:
    empty = await stored_bytes(engine, tmp_path)
    made = await service.create_output("o", [b"l"] * 3000, filename="x")
    async with engine.begin() as conn:
        past = datetime.now(UTC) - timedelta(seconds=1)
        await conn.execute(update(t.files).where(t.files.c.id == made["id"]).values(expires_at=past))
    with pytest.raises(NotFound):
        await service.content("o", made["id"])
    assert await stored_bytes(engine, tmp_path) == empty
