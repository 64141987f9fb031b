"""Bodies in the database (SPEC §10.7, ``RELAY_BATCH_PAYLOAD_STORE=database``): the ``payload_chunks``
table, written and read in chunks.

What it does. :func:`insert_requests` writes every item's request body of a batch in one transaction,
group by group as the caller produces them (Postgres: binary ``COPY``; SQLite: one ``executemany`` per
group), so 50 000 bodies cost a few statements and only a group at a time is held for the database;
:func:`insert_bodies` writes completed items' response bodies inside the caller's transaction (the
one that completes them); :func:`read_many` and :func:`read_bodies` read them back, many items per
query, and :func:`read_whole_first_chunks` the small ones a worker pool claimed, one query per
claim. A body longer than ``chunk_bytes`` is cut into several rows (``seq`` 0, 1, …), so no single
value is ever huge and a reader can go row by row.

What it deliberately does not know. Batches, item states and whether a batch uses this store at all
(``relay.payloads.base`` decides); the Files API's chunks (``kind='file'``, ``idx`` 0) are
``relay.store.files``' business.

A batch that adds more than a tenth to the table (at least ``ANALYZE_MIN`` bodies) is followed, on
Postgres, by ``ANALYZE payload_chunks`` (that table alone): its rows would otherwise be read with the
statistics of a smaller table until autovacuum comes round.

Invariants. A body reads back exactly as written, or not at all (written in one transaction). Rows
are never updated; nothing here deletes (bodies live as long as their batch, like payload files).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from sqlalchemy import Integer, String, bindparam, delete, exists, func, insert, select, text, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store import tables as t
from relay.store.driver import driver_connection

P = t.payload_chunks
CHUNK_BYTES: Final = 1 << 20  # largest value of one row
GROUP_BYTES: Final = 8 << 20  # bytes sent to the database per statement at most (roughly)
GROUP_ROWS: Final = 5_000
COPY_ROWS: Final = 200  # Postgres: groups this large go through COPY, smaller ones an executemany
REQUEST: Final = "request"
RESPONSE: Final = "response"
_COLUMNS = ("owner_id", "kind", "idx", "seq", "data")
ANALYZE_MIN: Final = 1_000  # request bodies of one batch below which statistics are left to autovacuum
ANALYZE_SHARE: Final = 0.1  # autovacuum's default analyze scale factor


def chunks(owner_id: str, kind: str, idx: int, body: bytes, chunk_bytes: int) -> Iterator[tuple[Any, ...]]:
    """The rows of one body: at least one (an empty body is one empty chunk)."""
    view = memoryview(body)
    for seq, start in enumerate(range(0, max(len(body), 1), chunk_bytes)):
        yield (owner_id, kind, idx, seq, bytes(view[start : start + chunk_bytes]))


def _groups(rows: Iterable[tuple[Any, ...]]) -> Iterator[list[tuple[Any, ...]]]:
    group: list[tuple[Any, ...]] = []
    size = 0
    for row in rows:
        group.append(row)
        size += len(row[4]) + 64
        if size >= GROUP_BYTES or len(group) >= GROUP_ROWS:
            yield group
            group, size = [], 0
    if group:
        yield group


async def insert_rows(conn: AsyncConnection, groups: Iterable[list[tuple[Any, ...]]]) -> None:
    """Insert groups of chunk rows in the caller's transaction, one statement per group."""
    for group in groups:
        await _insert_group(conn, group)


async def _insert_group(conn: AsyncConnection, group: list[tuple[Any, ...]]) -> None:
    # COPY pays a fixed cost per call (asyncpg reads the table's column types first): worth it for a
    # submission's thousands of rows, not for a finalize group's few responses.
    if conn.dialect.name == "postgresql" and len(group) >= COPY_ROWS:
        # The driver begins its transaction at the first statement: make sure COPY runs inside it.
        await conn.execute(select(1))
        raw = await driver_connection(conn)
        await raw.copy_records_to_table(P.name, records=group, columns=_COLUMNS)
    else:
        await conn.execute(insert(P), [dict(zip(_COLUMNS, row, strict=True)) for row in group])


async def insert_requests(
    engine: AsyncEngine,
    owner_id: str,
    bodies: AsyncIterator[list[bytes]],
    chunk_bytes: int = CHUNK_BYTES,
) -> int:
    """Every request body, in idx order, arriving in lists, in ONE transaction; returns how many. If
    ``bodies`` raises, nothing is written."""
    count = 0
    async with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
        async for group in bodies:
            rows = (
                row
                for idx, body in enumerate(group, start=count)
                for row in chunks(owner_id, REQUEST, idx, body, chunk_bytes)
            )
            await insert_rows(conn, _groups(rows))
            count += len(group)
    if count >= ANALYZE_MIN and engine.dialect.name == "postgresql":
        await _analyze_if_stale(engine, count)
    return count


async def _analyze_if_stale(engine: AsyncEngine, added: int) -> None:
    """``ANALYZE payload_chunks`` (that table only) when ``added`` rows are more than a tenth of what its
    statistics know, the share at which autovacuum would analyze it, a minute or so later. Until then
    the planner reads a fresh batch's bodies with the statistics of a much smaller table and picks
    plans that walk every chunk: a 50 000-item batch in a new database ran at 50 items/s instead of
    ~600 on the machine of docs/benchmarks.md."""
    async with engine.connect() as conn:
        known = (
            await conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = 'payload_chunks'::regclass"))
        ).scalar()
        if added > ANALYZE_SHARE * max(float(known or 0), 0.0):  # -1: never analyzed
            await conn.execute(text("ANALYZE payload_chunks"))
        await conn.commit()


async def insert_bodies(
    conn: AsyncConnection, kind: str, items: Sequence[tuple[str, int, bytes]], chunk_bytes: int = CHUNK_BYTES
) -> None:
    """Bodies of ``(owner_id, idx, body)`` in the caller's transaction."""
    await insert_rows(conn, _groups(row for o, i, b in items for row in chunks(o, kind, i, b, chunk_bytes)))


async def read_many(
    engine: AsyncEngine, kind: str, keys: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], bytes]:
    """The bodies of these ``(owner_id, idx)`` that exist (one query)."""
    if not keys:
        return {}
    parts: dict[tuple[str, int], list[bytes]] = {}
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(P.c.owner_id, P.c.idx, P.c.data)
            .where(P.c.kind == kind, tuple_(P.c.owner_id, P.c.idx).in_(sorted(set(keys))))
            .order_by(P.c.owner_id, P.c.idx, P.c.seq)
        )
        for owner_id, idx, data in rows:
            parts.setdefault((owner_id, idx), []).append(bytes(data))
    return {key: b"".join(chunk) for key, chunk in parts.items()}


async def read_whole_first_chunks(
    conn: AsyncConnection, owner_id: str, kind: str, idxs: Sequence[int], max_bytes: int
) -> dict[int, bytes]:
    """The bodies of these items that are ONE chunk of at most ``max_bytes`` (one query, on the caller's
    connection and transaction); larger or absent bodies are left out (read them with
    :func:`read_many`). Whether a body has a second chunk is asked of the table, not of a chunk size,
    so a body cut with any ``chunk_bytes`` is only ever returned whole."""
    if not idxs:
        return {}
    rows = await conn.execute(
        _first_chunks_sql(),
        {"f_owner": owner_id, "f_kind": kind, "f_idxs": sorted(set(idxs)), "f_max": max_bytes},
    )
    return {idx: bytes(data) for idx, data in rows}


#: Reads the whole one-chunk bodies of some items of a batch (``owner_id``, ``idxs``), each call its own
#: transaction on the connection :func:`first_chunk_reader` holds.
FirstChunkReader = Callable[[str, Sequence[int]], Awaitable[dict[int, bytes]]]


@asynccontextmanager
async def first_chunk_reader(
    engine: AsyncEngine, kind: str, max_bytes: int
) -> AsyncIterator[FirstChunkReader]:
    """One connection for a run of :func:`read_whole_first_chunks` calls (a prefetcher serving the
    groups that keep coming): no checkout per group; each read is its own short transaction."""
    async with engine.connect() as conn:

        async def read(owner_id: str, idxs: Sequence[int]) -> dict[int, bytes]:
            async with conn.begin():
                return await read_whole_first_chunks(conn, owner_id, kind, idxs, max_bytes)

        yield read


_FIRST_CHUNKS: list[Any] = []


def _first_chunks_sql() -> Any:
    """Built once: it runs once per claim of a batch using this store."""
    if not _FIRST_CHUNKS:
        second = P.alias("second")
        owner, kind = bindparam("f_owner", type_=t.ID), bindparam("f_kind", type_=String())
        _FIRST_CHUNKS.append(
            select(P.c.idx, P.c.data).where(
                P.c.owner_id == owner,
                P.c.kind == kind,
                P.c.idx.in_(bindparam("f_idxs", expanding=True)),
                P.c.seq == 0,
                func.length(P.c.data) <= bindparam("f_max", type_=Integer()),
                ~exists().where(
                    second.c.owner_id == owner,
                    second.c.kind == kind,
                    second.c.idx == P.c.idx,
                    second.c.seq == 1,
                ),
            )
        )
    return _FIRST_CHUNKS[0]


async def read_bodies(engine: AsyncEngine, owner_id: str, kind: str, idxs: Sequence[int]) -> dict[int, bytes]:
    """The bodies of these items that exist, by idx (one query)."""
    if not idxs:
        return {}
    parts: dict[int, list[bytes]] = {}
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(P.c.idx, P.c.data)
            .where(P.c.owner_id == owner_id, P.c.kind == kind, P.c.idx.in_(sorted(set(idxs))))
            .order_by(P.c.idx, P.c.seq)
        )
        for idx, data in rows:
            parts.setdefault(idx, []).append(bytes(data))
    return {idx: b"".join(chunk) for idx, chunk in parts.items()}


async def delete_requests(engine: AsyncEngine, batch_id: str) -> None:
    """Remove a batch's request bodies (a create that did not commit its batch: nothing refers to them)."""
    async with engine.begin() as conn:
        await conn.execute(delete(P).where(P.c.owner_id == batch_id, P.c.kind == "request"))
