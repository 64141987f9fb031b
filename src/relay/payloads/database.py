"""The ``database`` payload store (SPEC §10.7): request bodies, response bodies and Files API bytes as
chunks in the database (``relay.store.payload_chunks``, ``relay.store.files``), so replicas need no shared
volume.

Why its own module. It is one of the two implementations of ``relay.payloads.base.PayloadStore``
(the ``files`` store is ``relay.payloads.files``); what the two share — the protocol, ``KeptResponse``,
the buffered sink, the read-ahead answer — is ``relay.payloads.base``'s.

What it deliberately does not know. SQL (the store modules run it) and which store a batch uses
(``PayloadStores`` picks by the batch's recorded store).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence

from relay.domain.batches import ResponseRef
from relay.payloads.base import (
    PREFETCH_BYTES,
    Buffered,
    FileSink,
    KeptResponse,
    Prefetched,
    StoreName,
    answer_prefetch,
)
from relay.store import files as file_rows
from relay.store import payload_chunks as db
from relay.store.engine import Connection, Engine

log = logging.getLogger("relay.batches")


class _ChunkSink:
    def __init__(self, engine: Engine, file_id: str, chunk_bytes: int) -> None:
        self._engine, self._file_id, self._chunk_bytes = engine, file_id, chunk_bytes
        self._buffer = Buffered(chunk_bytes)
        self._seq = 0

    async def write(self, data: bytes) -> None:
        full = self._buffer.add(data)
        if full is None:
            return
        size = self._chunk_bytes
        whole = len(full) // size * size  # rows of exactly chunk_bytes; the rest waits for more
        view = memoryview(full)
        for start in range(0, whole, size):
            await self._insert(bytes(view[start : start + size]))
        if whole < len(full):
            self._buffer.add(bytes(view[whole:]))

    async def _insert(self, data: bytes) -> None:
        await file_rows.insert_chunk(self._engine, self._file_id, self._seq, data)
        self._seq += 1

    async def commit(self) -> None:
        rest = self._buffer.take()
        if rest:
            await self._insert(rest)

    async def discard(self) -> None:
        await file_rows.delete_chunks(self._engine, self._file_id)


class DatabaseStore:
    """``database``: bodies as chunks in ``payload_chunks`` (``relay.store.payload_chunks``)."""

    name: StoreName = "database"

    def __init__(self, engine: Engine, chunk_bytes: int = db.CHUNK_BYTES) -> None:
        self._engine = engine
        self._chunk_bytes = chunk_bytes
        # Request reads waiting for the next grouped query (items start in groups: one query each).
        self._wanted: dict[tuple[str, int], asyncio.Future[bytes | None]] = {}
        self._reader: asyncio.Task[None] | None = None
        # Claimed groups whose small bodies are read ahead, in claim order, by one task on one connection.
        self._prefetches: deque[tuple[str, dict[int, asyncio.Future[bytes | None]]]] = deque()
        self._prefetcher: asyncio.Task[None] | None = None

    async def write_requests(self, batch_id: str, bodies: Iterable[bytes]) -> int:
        # Serialising 50 000 bodies is CPU work: the iterator is advanced in a thread, a group at a time.
        return await db.insert_requests(self._engine, batch_id, _groups_in_threads(bodies), self._chunk_bytes)

    async def discard_requests(self, batch_id: str) -> None:
        await db.delete_requests(self._engine, batch_id)

    async def remove_batch(self, batch_id: str) -> None:
        """Nothing left: the deleting transaction removed the batch's chunks with its rows."""

    async def read_request(self, batch_id: str, idx: int) -> bytes:
        key = (batch_id, idx)
        future = self._wanted.get(key)
        if future is None:
            future = self._wanted[key] = asyncio.get_running_loop().create_future()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_wanted(), name="batch-request-reader")
        body = await asyncio.shield(future)
        if body is None:
            raise FileNotFoundError(f"batch {batch_id} has no request {idx} in the database")
        return body

    async def read_requests(self, batch_id: str, idxs: Sequence[int]) -> dict[int, bytes]:
        found = await db.read_bodies(self._engine, batch_id, db.REQUEST, idxs)
        missing = [idx for idx in idxs if idx not in found]
        if missing:
            raise FileNotFoundError(f"batch {batch_id} has no request {missing[0]} in the database")
        return found

    def prefetch_requests(self, batch_id: str, idxs: Sequence[int]) -> Prefetched:
        """Start reading these claimed items' request bodies now, one query for the group; only
        bodies of one chunk of at most ``PREFETCH_BYTES`` come this way (a future answers ``None`` for
        the others, which :meth:`read_request` then reads when their item runs). Holding at most the
        claimed-ahead items' small bodies bounds the memory this takes."""
        loop = asyncio.get_running_loop()
        futures: dict[int, asyncio.Future[bytes | None]] = {idx: loop.create_future() for idx in idxs}
        if futures:
            self._prefetches.append((batch_id, futures))
            if self._prefetcher is None or self._prefetcher.done():
                self._prefetcher = asyncio.create_task(self._prefetch(), name="batch-request-prefetch")
        return futures

    async def _prefetch(self) -> None:
        """Serve the queued groups in order, on one connection while groups keep coming. The last
        check of the queue is followed by no ``await``: a group queued while the connection was
        being given back is served by this task's next round, never left unanswered."""
        while self._prefetches:
            try:
                async with db.first_chunk_reader(self._engine, db.REQUEST, PREFETCH_BYTES) as read:
                    while self._prefetches:
                        batch_id, futures = self._prefetches[0]
                        found = await read(batch_id, list(futures))
                        self._prefetches.popleft()
                        answer_prefetch(futures, found)
            except Exception as exc:  # those items read their bodies one by one when they run
                log.warning("reading batch request bodies ahead failed: %s", type(exc).__name__)
                while self._prefetches:
                    answer_prefetch(self._prefetches.popleft()[1], {})

    async def _read_wanted(self) -> None:
        """Answer every waiting read with one query per round, until none waits."""
        await asyncio.sleep(0)  # the other items of a started group ask in this same loop turn
        while self._wanted:
            group = dict(self._wanted)
            self._wanted.clear()
            try:
                found = await db.read_many(self._engine, db.REQUEST, list(group))
            except Exception as exc:
                for future in group.values():
                    if not future.done():
                        future.set_exception(exc)
                continue
            for key, future in group.items():
                if not future.done():
                    future.set_result(found.get(key))

    def keep_response(self, batch_id: str, idx: int, body: bytes) -> KeptResponse:
        return KeptResponse(body=body)

    async def flush(self) -> None:
        return None  # the bodies are written by the transaction that completes their items

    async def save_responses(self, conn: Connection, items: Sequence[tuple[str, int, KeptResponse]]) -> None:
        rows = [(batch_id, idx, kept.body) for batch_id, idx, kept in items if kept.body is not None]
        if rows:
            await db.insert_bodies(conn, db.RESPONSE, rows, self._chunk_bytes)

    async def read_responses(
        self, batch_id: str, refs: Mapping[int, ResponseRef | None]
    ) -> dict[int, bytes | None]:
        found = await db.read_bodies(self._engine, batch_id, db.RESPONSE, list(refs))
        return {idx: found.get(idx) for idx in refs}

    async def open_file(self, file_id: str) -> FileSink:
        return _ChunkSink(self._engine, file_id, self._chunk_bytes)

    async def read_file(self, file_id: str) -> AsyncIterator[bytes]:
        seq = 0
        while (chunk := await file_rows.read_chunk(self._engine, file_id, seq)) is not None:
            yield chunk
            seq += 1

    async def remove_file(self, file_id: str) -> None:
        await file_rows.delete_chunks(self._engine, file_id)

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.cancel()
        while self._prefetches:
            answer_prefetch(self._prefetches.popleft()[1], {})


async def _groups_in_threads(bodies: Iterable[bytes], size: int = 2_000) -> AsyncIterator[list[bytes]]:
    """``bodies`` in lists of ``size``, each produced in a worker thread: producing them (serialising
    50 000 items) is CPU work the event loop must not do."""
    iterator = iter(bodies)
    while group := await asyncio.to_thread(lambda: list(itertools.islice(iterator, size))):
        yield group
