"""The ``files`` payload store (SPEC §10.7): batch bodies in the shared payload directory
(``relay.payloads.directory``) and the Files API's bytes (``relay.payloads.file_bytes``), every
blocking call in a worker thread.

What it deliberately does not know. The database (an item row's reference is the record of a kept
response), item states, who may read a batch.

Invariants. It creates nothing under the directory until a batch is written or an item of one
completes; a response kept is on disk (``flush``) before the transaction completing its item.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path

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
from relay.payloads.directory import PayloadDir, sync_descriptors
from relay.payloads.file_bytes import READ_CHUNK, FileBytesDir
from relay.store.engine import Connection

log = logging.getLogger("relay.batches")


class _DiskSink:
    def __init__(self, directory: FileBytesDir, file_id: str, fd: int) -> None:
        self._directory, self._file_id, self._fd = directory, file_id, fd
        self._buffer = Buffered(READ_CHUNK)

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


class FileStore:
    """``files``: the payload directory (``relay.payloads.directory``), its blocking calls in threads.
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

    async def read_requests(self, batch_id: str, idxs: Sequence[int]) -> dict[int, bytes]:
        return await asyncio.to_thread(self._read_requests, batch_id, idxs)

    def _read_requests(self, batch_id: str, idxs: Sequence[int]) -> dict[int, bytes]:
        """Each file opened once for the group; a body it could not read whole is read alone (which
        raises ``FileNotFoundError`` naming what is missing)."""
        found = self.dir.read_small_requests(batch_id, idxs, sys.maxsize)
        for idx in idxs:
            if idx not in found:
                found[idx] = self.dir.read_request(batch_id, idx)
        return found

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
            answer_prefetch(futures, found)

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
