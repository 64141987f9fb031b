"""Where batch bodies live (SPEC §10.7): the :class:`PayloadStore` seam, what both stores share, and
:class:`PayloadStores`, which holds both.

What it does. ``RELAY_BATCH_PAYLOAD_STORE`` picks the store new batches are submitted under:
``relay.payloads.files.FileStore`` (``files``, the default: the directory of
``relay.payloads.directory``, which every replica must share) or
``relay.payloads.database.DatabaseStore`` (``database``: ``payload_chunks`` via
``relay.store.payload_chunks``, so replicas need no shared volume and ``load input:`` cannot happen). Each
batch records its store (``batches.payload_store``) and :class:`PayloadStores` hands out the one a
batch was submitted under, so switching the setting keeps existing batches readable and runnable.

The contract (one test suite runs it against both: tests/integration/payloads/test_contract.py):

* :meth:`~PayloadStore.write_requests` stores every item's request body, durably, before the batch
  row commits; :meth:`~PayloadStore.read_request` gives one back or raises ``FileNotFoundError``;
  :meth:`~PayloadStore.read_requests` gives a group back in one read (a retry copying them).
* A completed item's response is kept in two steps around the transaction that completes it:
  :meth:`~PayloadStore.keep_response` (while it runs; the file store appends it to its file) then
  :meth:`~PayloadStore.flush` (before that transaction: the appended bytes reach the disk) and
  :meth:`~PayloadStore.save_responses` (inside it: the database store inserts the body, so state and
  body commit together). :meth:`~PayloadStore.read_responses` reads them back by idx, ``None`` where
  this replica cannot.
* :meth:`~PayloadStore.remove_batch` removes what a deleted batch (SPEC §17 retention, §15 ``DELETE``:
  ``relay.batches.deleter``) left in the store once its rows are gone: the file store's directory (the
  database store's chunks went with the item rows); nothing of another batch.
* The Files API's files (SPEC §14): :meth:`~PayloadStore.open_file` gives a :class:`FileSink` that
  takes the bytes a chunk at a time (nothing whole in memory) and ends with ``commit`` (the bytes are
  durable and whole) or ``discard`` (nothing stays); :meth:`~PayloadStore.read_file` streams them back
  in chunks (``FileNotFoundError`` when this replica does not have them); :meth:`~PayloadStore.remove_file`
  removes them (a no-op when they are gone).

What it deliberately does not know. Item states and who may read a batch; either store's workings
(both import this module, never the reverse).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from relay.domain.batches import ResponseRef
from relay.store.engine import Connection

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

    # Many items' bodies at once (a retry copying them, SPEC §17): one read for the group, every body
    # present, else FileNotFoundError.
    async def read_requests(self, batch_id: str, idxs: Sequence[int]) -> dict[int, bytes]: ...

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


class Buffered:
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


class PayloadStores:
    """Both stores of this process, and which one new batches use (``RELAY_BATCH_PAYLOAD_STORE``)."""

    def __init__(self, files: PayloadStore, database: PayloadStore, current: StoreName) -> None:
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


def answer_prefetch(futures: Mapping[int, asyncio.Future[bytes | None]], found: Mapping[int, bytes]) -> None:
    for idx, future in futures.items():
        if not future.done():
            future.set_result(found.get(idx))
