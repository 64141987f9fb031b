"""Where batch bodies live (SPEC §10.7): the :class:`PayloadStore` seam and its two implementations.

What it does. ``RELAY_BATCH_PAYLOAD_STORE`` picks the store new batches are submitted under:
:class:`FileStore` (``files``, the default: the directory of ``relay.batches.payloads``, which every
replica must share) or :class:`DatabaseStore` (``database``: ``payload_chunks`` via
``relay.store.payloads``, so replicas need no shared volume and ``load input:`` cannot happen). Each
batch records its store (``batches.payload_store``) and :class:`PayloadStores` hands out the one a
batch was submitted under, so switching the setting keeps existing batches readable and runnable.

The contract (one test suite runs it against both: tests/batches/test_payload_store.py):

* :meth:`~PayloadStore.write_requests` stores every item's request body, durably, before the batch
  row commits; :meth:`~PayloadStore.read_request` gives one back or raises ``FileNotFoundError``.
* A completed item's response is kept in two steps around the transaction that completes it:
  :meth:`~PayloadStore.keep_response` (while it runs; the file store appends it to its file) then
  :meth:`~PayloadStore.flush` (before that transaction: the appended bytes reach the disk) and
  :meth:`~PayloadStore.save_responses` (inside it: the database store inserts the body, so state and
  body commit together). :meth:`~PayloadStore.read_responses` reads them back by idx, ``None`` where
  this replica cannot.
* :meth:`~PayloadStore.remove_batch` removes what a deleted batch (SPEC §15 ``DELETE``) left in the
  store once its rows are gone: the file store's directory (the database store's chunks went with the
  rows); nothing of another batch.
* The Files API's files (SPEC §14): :meth:`~PayloadStore.open_file` gives a :class:`FileSink` that
  takes the bytes a chunk at a time (nothing whole in memory) and ends with ``commit`` (the bytes are
  durable and whole) or ``discard`` (nothing stays); :meth:`~PayloadStore.read_file` streams them back
  in chunks (``FileNotFoundError`` when this replica does not have them); :meth:`~PayloadStore.remove_file`
  removes them (a no-op when they are gone).

What it deliberately does not know. Item states and who may read a batch.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from relay.batches.file_payloads import READ_CHUNK, FileBytesDir
from relay.batches.payloads import PayloadDir, sync_descriptors
from relay.domain.batches import ResponseRef
from relay.store import files as file_rows
from relay.store import payloads as db
from relay.store.engine import Connection, Engine

log = logging.getLogger("relay.batches")

StoreName = Literal["files", "database"]
STORE_NAMES: tuple[StoreName, ...] = ("files", "database")
#: Request bodies read ahead, by idx: a future per item, ``None`` when it must be read as it runs.
Prefetched = Mapping[int, "asyncio.Future[bytes | None]"]
PREFETCH_BYTES = 64 << 10  # larger request bodies are not read ahead (memory: claimed-ahead items only)


@dataclass(frozen=True, slots=True)
class KeptResponse:
    """What the transaction completing an item records of its response: where the file store put it
    (``ref``), or the body the database store writes in that transaction (``body``)."""

    ref: ResponseRef | None = None
    body: bytes | None = None


class PayloadStore(Protocol):
    name: StoreName

    async def write_requests(self, batch_id: str, bodies: Iterable[bytes]) -> int: ...

    async def discard_requests(self, batch_id: str) -> None: ...  # a batch that did not commit

    async def remove_batch(self, batch_id: str) -> None: ...  # a deleted batch, once its rows are gone

    async def read_request(self, batch_id: str, idx: int) -> bytes: ...

    def prefetch_requests(self, batch_id: str, idxs: Sequence[int]) -> Prefetched: ...

    def keep_response(self, batch_id: str, idx: int, body: bytes) -> KeptResponse: ...

    async def flush(self) -> None: ...

    async def save_responses(
        self, conn: Connection, items: Sequence[tuple[str, int, KeptResponse]]
    ) -> None: ...

    async def read_responses(
        self, batch_id: str, refs: Mapping[int, ResponseRef | None]
    ) -> dict[int, bytes | None]: ...

    async def open_file(self, file_id: str) -> FileSink: ...

    def read_file(self, file_id: str) -> AsyncIterator[bytes]: ...

    async def remove_file(self, file_id: str) -> None: ...

    def close(self) -> None: ...


class FileSink(Protocol):
    """One file being written: ``write`` its bytes in order, then ``commit`` or ``discard``."""

    async def write(self, data: bytes) -> None: ...

    async def commit(self) -> None: ...

    async def discard(self) -> None: ...


class _Buffered:
    """Bytes gathered until ``size`` of them make one write (one disk write, one database row)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._parts: list[bytes] = []
        self._held = 0

    def add(self, data: bytes) -> bytes | None:
        self._parts.append(data)
        self._held += len(data)
        return self.take() if self._held >= self._size else None

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts, self._held = [], 0
        return data


class _DiskSink:
    def __init__(self, directory: FileBytesDir, file_id: str, fd: int) -> None:
        self._directory, self._file_id, self._fd = directory, file_id, fd
        self._buffer = _Buffered(READ_CHUNK)

    async def write(self, data: bytes) -> None:
        full = self._buffer.add(data)
        if full is not None:
            await asyncio.to_thread(self._directory.append, self._fd, full)

    async def commit(self) -> None:
        rest = self._buffer.take()
        if rest:
            await asyncio.to_thread(self._directory.append, self._fd, rest)
        await asyncio.to_thread(self._directory.commit, self._file_id, self._fd)

    async def discard(self) -> None:
        await asyncio.to_thread(self._directory.discard, self._file_id, self._fd)


class _ChunkSink:
    def __init__(self, engine: Engine, file_id: str, chunk_bytes: int) -> None:
        self._engine, self._file_id, self._chunk_bytes = engine, file_id, chunk_bytes
        self._buffer = _Buffered(chunk_bytes)
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


class FileStore:
    """``files``: the payload directory (``relay.batches.payloads``), its blocking calls in threads.
    Creates nothing under the directory until a batch is written or an item of one completes."""

    name: StoreName = "files"

    def __init__(self, root: str | Path, *, group_readable: bool = False) -> None:
        self.dir = PayloadDir(root, group_readable=group_readable)
        self.file_bytes = FileBytesDir(root, self.dir.modes)
        self._prefetching: set[asyncio.Task[None]] = set()

    async def write_requests(self, batch_id: str, bodies: Iterable[bytes]) -> int:
        return await asyncio.to_thread(self.dir.write_requests, batch_id, bodies)

    async def discard_requests(self, batch_id: str) -> None:
        await asyncio.to_thread(self.dir.discard_requests, batch_id)

    async def remove_batch(self, batch_id: str) -> None:
        self.dir.forget(batch_id)  # in the event loop's thread, like every append
        await asyncio.to_thread(self.dir.remove_batch, batch_id)

    async def read_request(self, batch_id: str, idx: int) -> bytes:
        return await asyncio.to_thread(self.dir.read_request, batch_id, idx)

    def prefetch_requests(self, batch_id: str, idxs: Sequence[int]) -> Prefetched:
        """Read these claimed items' request bodies of at most ``PREFETCH_BYTES`` in ONE worker-thread
        hop (each file opened once), instead of a hop per item as it starts; a future answers ``None``
        for the others, which :meth:`read_request` reads when their item runs."""
        loop = asyncio.get_running_loop()
        futures: dict[int, asyncio.Future[bytes | None]] = {idx: loop.create_future() for idx in idxs}
        if futures:
            task = asyncio.create_task(self._prefetch(batch_id, futures), name="batch-request-prefetch")
            self._prefetching.add(task)
            task.add_done_callback(self._prefetching.discard)
        return futures

    async def _prefetch(self, batch_id: str, futures: dict[int, asyncio.Future[bytes | None]]) -> None:
        found: dict[int, bytes] = {}
        try:
            found = await asyncio.to_thread(
                self.dir.read_small_requests, batch_id, list(futures), PREFETCH_BYTES
            )
        except Exception as exc:  # those items read their bodies one by one when they run
            log.warning("reading batch request bodies ahead failed: %s", type(exc).__name__)
        finally:
            _answer(futures, found)

    def keep_response(self, batch_id: str, idx: int, body: bytes) -> KeptResponse:
        return KeptResponse(ref=self.dir.append_response(batch_id, body))

    async def flush(self) -> None:
        fds = self.dir.responses_to_sync()
        if fds:
            await asyncio.to_thread(sync_descriptors, fds)

    async def save_responses(self, conn: Connection, items: Sequence[tuple[str, int, KeptResponse]]) -> None:
        return None  # the item row's reference is the record; the bytes were flushed before

    async def read_responses(
        self, batch_id: str, refs: Mapping[int, ResponseRef | None]
    ) -> dict[int, bytes | None]:
        return await asyncio.to_thread(self.dir.read_responses, batch_id, refs)

    async def open_file(self, file_id: str) -> FileSink:
        return _DiskSink(self.file_bytes, file_id, await asyncio.to_thread(self.file_bytes.create, file_id))

    async def read_file(self, file_id: str) -> AsyncIterator[bytes]:
        fd = await asyncio.to_thread(self.file_bytes.open_for_reading, file_id)
        try:
            while chunk := await asyncio.to_thread(os.read, fd, READ_CHUNK):
                yield chunk
        finally:
            os.close(fd)

    async def remove_file(self, file_id: str) -> None:
        await asyncio.to_thread(self.file_bytes.remove, file_id)

    def close(self) -> None:
        for task in self._prefetching:
            task.cancel()  # its futures are answered (None: read when run)
        self.dir.close()


class DatabaseStore:
    """``database``: bodies as chunks in ``payload_chunks`` (``relay.store.payloads``)."""

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
                        _answer(futures, found)
            except Exception as exc:  # those items read their bodies one by one when they run
                log.warning("reading batch request bodies ahead failed: %s", type(exc).__name__)
                while self._prefetches:
                    _answer(self._prefetches.popleft()[1], {})

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
            _answer(self._prefetches.popleft()[1], {})


class PayloadStores:
    """Both stores of this process, and which one new batches use (``RELAY_BATCH_PAYLOAD_STORE``)."""

    def __init__(self, files: FileStore, database: DatabaseStore, current: StoreName) -> None:
        self._by_name: dict[str, PayloadStore] = {"files": files, "database": database}
        self.current: PayloadStore = self._by_name[current]

    def of(self, name: str) -> PayloadStore:
        """The store a batch recorded (``BatchRecord.payload_store``)."""
        return self._by_name[name]

    async def flush(self) -> None:
        for store in self._by_name.values():
            await store.flush()

    async def save_responses(
        self, conn: Connection, items: Sequence[tuple[str, str, int, KeptResponse]]
    ) -> None:
        """Inside the transaction completing these ``(store, batch_id, idx, kept)`` items."""
        for name, store in self._by_name.items():
            mine = [(b, i, k) for s, b, i, k in items if s == name]
            if mine:
                await store.save_responses(conn, mine)

    def close(self) -> None:
        for store in self._by_name.values():
            store.close()


async def _groups_in_threads(bodies: Iterable[bytes], size: int = 2_000) -> AsyncIterator[list[bytes]]:
    """``bodies`` in lists of ``size``, each produced in a worker thread: producing them (serialising
    50 000 items) is CPU work the event loop must not do."""
    iterator = iter(bodies)
    while group := await asyncio.to_thread(lambda: list(itertools.islice(iterator, size))):
        yield group


def _answer(futures: Mapping[int, asyncio.Future[bytes | None]], found: Mapping[int, bytes]) -> None:
    for idx, future in futures.items():
        if not future.done():
            future.set_result(found.get(idx))
