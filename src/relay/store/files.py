"""The Files API's rows and database bytes (SPEC §14): the ``files`` table, and ``payload_chunks`` rows
of kind ``file`` (``idx`` 0, ``seq`` 0, 1, …) for files kept under ``RELAY_BATCH_PAYLOAD_STORE=database``.

What it does. Inserts a file's row while its bytes are written (``uploading``) and marks it
``processed`` once they are whole; reads one row, lists an owner's rows a page at a time, finds rows
the sweep removes (expired, or uploads abandoned mid-way), and deletes a row together with its
database chunks in one transaction. Chunks are written one per transaction (a slow upload holds no
database lock between them) and read one per query, so no file is ever held whole in memory.

What it deliberately does not know. Who may see a file (callers pass the owner), the file store on
disk, ids and clocks (callers pass them), HTTP.

Invariants. Only ``processed`` rows are ever shown by :func:`visible` and :func:`page`; a row and its
chunks go in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Final, Literal

from sqlalchemy import ColumnElement, delete, func, insert, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store import tables as t

F = t.files
P = t.payload_chunks
KIND: Final = "file"


@dataclass(frozen=True, slots=True)
class FileRow:
    id: str
    owner: str
    purpose: str
    filename: str
    bytes: int
    status: str
    payload_store: str
    created_at: datetime
    expires_at: datetime | None


_FIELDS: Final = tuple(f.name for f in fields(FileRow))


def _row(r: Row[Any]) -> FileRow:
    m = r._mapping
    return FileRow(**{name: m[name] for name in _FIELDS})


async def insert_uploading(engine: AsyncEngine, row: FileRow) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(F).values(**{n: getattr(row, n) for n in _FIELDS}))


async def mark_processed(
    engine: AsyncEngine, file_id: str, *, purpose: str, filename: str, size: int, expires_at: datetime | None
) -> bool:
    """The upload's bytes are whole: the row becomes visible. False when the row is gone (swept)."""
    async with engine.begin() as conn:
        result = await conn.execute(
            update(F)
            .where(F.c.id == file_id, F.c.status == "uploading")
            .values(status="processed", purpose=purpose, filename=filename, bytes=size, expires_at=expires_at)
        )
    return bool(result.rowcount)


def _live(now: datetime) -> ColumnElement[bool]:
    return or_(F.c.expires_at.is_(None), F.c.expires_at > now)


async def visible(engine: AsyncEngine, owner: str, file_id: str, now: datetime) -> FileRow | None:
    """The owner's processed, unexpired file, or None (unknown, foreign, expired or not whole)."""
    async with engine.connect() as conn:
        r = (
            await conn.execute(
                select(F).where(F.c.id == file_id, F.c.owner == owner, F.c.status == "processed", _live(now))
            )
        ).first()
    return None if r is None else _row(r)


async def find(engine: AsyncEngine, file_id: str) -> FileRow | None:
    """The row whatever its owner, state or expiry (the sweep and on-access removal)."""
    async with engine.connect() as conn:
        r = (await conn.execute(select(F).where(F.c.id == file_id))).first()
    return None if r is None else _row(r)


async def page(
    engine: AsyncEngine,
    owner: str,
    now: datetime,
    *,
    purpose: str | None,
    after: str | None,
    order: Literal["asc", "desc"],
    limit: int,
) -> list[FileRow]:
    """Up to ``limit`` of the owner's visible files in id (creation) order, after the ``after`` id."""
    query = select(F).where(F.c.owner == owner, F.c.status == "processed", _live(now))
    if purpose is not None:
        query = query.where(F.c.purpose == purpose)
    if after is not None:
        query = query.where(F.c.id > after if order == "asc" else F.c.id < after)
    query = query.order_by(F.c.id.asc() if order == "asc" else F.c.id.desc()).limit(limit)
    async with engine.connect() as conn:
        return [_row(r) for r in await conn.execute(query)]


async def to_sweep(engine: AsyncEngine, now: datetime, stale_before: datetime, limit: int) -> list[FileRow]:
    """Rows whose bytes must go: expired files, and uploads begun before ``stale_before`` that never
    finished (their writer died)."""
    expired = F.c.expires_at.is_not(None) & (F.c.expires_at <= now)
    abandoned = (F.c.status == "uploading") & (F.c.created_at < stale_before)
    async with engine.connect() as conn:
        rows = await conn.execute(select(F).where(or_(expired, abandoned)).order_by(F.c.id).limit(limit))
        return [_row(r) for r in rows]


async def delete_file(engine: AsyncEngine, file_id: str) -> bool:
    """The row and its database chunks, in one transaction; whether there was a row."""
    async with engine.begin() as conn:
        await _delete_chunks(conn, file_id)
        result = await conn.execute(delete(F).where(F.c.id == file_id))
    return bool(result.rowcount)


async def _delete_chunks(conn: AsyncConnection, file_id: str) -> None:
    await conn.execute(delete(P).where(P.c.owner_id == file_id, P.c.kind == KIND))


async def delete_chunks(engine: AsyncEngine, file_id: str) -> None:
    async with engine.begin() as conn:
        await _delete_chunks(conn, file_id)


async def insert_chunk(engine: AsyncEngine, file_id: str, seq: int, data: bytes) -> None:
    async with engine.begin() as conn:
        await conn.execute(insert(P).values(owner_id=file_id, kind=KIND, idx=0, seq=seq, data=data))


async def read_chunk(engine: AsyncEngine, file_id: str, seq: int) -> bytes | None:
    """Chunk ``seq`` of the file, or None past its end."""
    async with engine.connect() as conn:
        data = (
            await conn.execute(
                select(P.c.data).where(
                    P.c.owner_id == file_id, P.c.kind == KIND, P.c.idx == 0, P.c.seq == seq
                )
            )
        ).scalar()
    return None if data is None else bytes(data)


async def count_chunks(engine: AsyncEngine, file_ids: Sequence[str]) -> int:
    """How many chunk rows these files have (the sweep's and the tests' check that bytes are gone)."""
    async with engine.connect() as conn:
        query = select(func.count()).select_from(P).where(P.c.kind == KIND, P.c.owner_id.in_(list(file_ids)))
        return int((await conn.execute(query)).scalar() or 0)
