"""Deleting one finished batch (SPEC §17 "Retention"): the one deletion the retention sweep,
``DELETE /api/batches/{id}`` (admin, any API's id) and §15's ``DELETE …/messages/batches/{id}`` share.

What it does. :meth:`BatchDeleter.delete` refuses an unknown batch (:class:`BatchNotFound`, 404) and
one that is not finished (:class:`BatchNotFinished`, 409 ``batch_not_finished``), then removes, in
this order: the files a façade produced for it (§14's output and error files, through the
``produced_files`` callback ``relay.boot`` passes: never the uploaded input file), its items with their
database-held bodies a chunk at a time (:data:`CHUNK_ITEMS` per transaction), any body chunk left over,
its idempotency rows (SPEC §10.10), its row, and last its payload directory (``files`` store). Usage
events are kept: they are the record of what ran and was priced (SPEC §8). Each deletion is counted in
``relay_retention_deleted_total{what}``; the caller logs it (one line per ``DELETE``, one per sweep).

What it deliberately does not know. SQL (``relay.store.retention``), which API made the batch and what
its files are (the callback's business), who may delete (the routes check the admin or the owner).

Invariants. A batch that is not finished is never touched: the check comes first and every statement
repeats it. Rows go before bodies they point at are removed from disk, and items before their batch's
row, so a deletion cut short (a crash, a stop, a database away) leaves a finished batch that the next
sweep or ``DELETE`` deletes, never a readable item without its body. No transaction is longer than one
chunk, so claims of other batches never wait for a deletion. Two deletions of one batch at once (two
replicas) both end with it gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from relay.batches.service import BatchNotFound
from relay.domain.batch_retry import BatchNotFinished
from relay.payloads.base import PayloadStores
from relay.store import idempotency
from relay.store import retention as store
from relay.store.batch_queue import InTransaction
from relay.store.engine import Engine
from relay.telemetry.metrics import RetentionMetrics

CHUNK_ITEMS: Final = 1_000  # items (with their bodies) deleted per transaction
CHUNK_ROWS: Final = 1_000  # leftover body chunks deleted per transaction

#: ``(api, api_data) -> files removed``: the façade removes what it produced for a batch (§14's output
#: and error files), given the fields it stored on the batch; ``relay.boot`` passes it.
ProducedFiles = Callable[[str, Mapping[str, Any] | None], Awaitable[int]]


@dataclass(slots=True)
class Deleted:
    """What one deletion (or a whole sweep) removed, by ``relay_retention_deleted_total``'s ``what``."""

    batches: int = 0
    items: int = 0
    files: int = 0
    idempotency_keys: int = 0
    usage_events: int = 0
    payloads: int = 0

    def add(self, other: Deleted) -> None:
        for name in self.counts():
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def counts(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def describe(self) -> str:
        return ", ".join(f"{n} {name.replace('_', ' ')}" for name, n in self.counts().items())


async def _no_files(api: str, api_data: Mapping[str, Any] | None) -> int:
    return 0


class BatchDeleter:
    def __init__(
        self,
        engine: Engine,
        payloads: PayloadStores,
        metrics: RetentionMetrics,
        *,
        produced_files: ProducedFiles = _no_files,
    ) -> None:
        self._engine = engine
        self._payloads = payloads
        self._metrics = metrics
        self._produced_files = produced_files

    async def delete(self, batch_id: str, *, also: InTransaction | None = None) -> Deleted:
        """Delete the finished batch ``batch_id`` now, as described above; what went. ``also`` runs
        in the transaction that removes the batch's row (the admin's audit entry)."""
        target = await store.deletion_target(self._engine, batch_id)
        if target is None:
            raise BatchNotFound()
        if not target.finished:
            raise BatchNotFinished(
                f"batch {batch_id} is not finished: cancel it, or wait until every item is final "
                "(and, for an OpenAI batch, its output files are written)"
            )
        deleted = Deleted(files=await self._produced_files(target.api, target.api_data))
        try:
            await self._delete_rows(target, deleted, also)
        finally:  # what went is counted, also when the rest is left to the next attempt
            self._metrics.count(deleted.counts())
        return deleted

    async def _delete_rows(
        self, target: store.DeletionTarget, deleted: Deleted, also: InTransaction | None = None
    ) -> None:
        last = -1
        while True:
            n, last = await store.delete_items(self._engine, target.id, CHUNK_ITEMS, after_idx=last)
            if not n:
                break
            deleted.items += n
            await asyncio.sleep(0)  # one chunk at a time: the event loop's other work goes between
        leftover = CHUNK_ROWS
        while leftover == CHUNK_ROWS:  # none, unless an item's chunks outlived it (a past crash)
            leftover = await store.delete_leftover_chunks(self._engine, target.id, CHUNK_ROWS)
        deleted.idempotency_keys = await idempotency.delete_answers_naming(
            self._engine, target.owner, target.id, target.created_at
        )
        if await store.delete_batch_row(self._engine, target.id, also):
            deleted.batches = 1
        await self._payloads.of(target.payload_store).remove_batch(target.id)
