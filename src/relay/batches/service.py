"""The batch API's services (SPEC §10.1–§10.5): submit, status, results, cancel.

What it does. :meth:`BatchService.submit` validates a submission (``relay.domain.batches``), writes the
items' request bodies to the current payload store (``RELAY_BATCH_PAYLOAD_STORE``), then the batch
(recording that store) and all its items in one transaction, and answers what the 202
carries; :meth:`status` and :meth:`results` read the owner's batch and hand it to
``relay.batches.results``, which renders the §10.2 view and the §10.3 results page by page;
:meth:`cancel` cancels the available items (with their usage events) and asks this replica's worker
pool to stop the batch's running items.

What it deliberately does not know. HTTP (``relay.batch_apis.native`` renders), how items run
(``relay.batches.runner``) and rate limits: submitting, polling and reading results never count
against a policy (SPEC §10.1).

Invariants. Only the owner sees a batch: the same relay key (by hash) or any token of the same user;
anyone else gets :class:`BatchNotFound`, never a 403 (SPEC §10.8). Ids and timestamps are minted here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import orjson

from relay.adapters.json_codec import DEFAULT_MAX_DEPTH
from relay.batches.new_batch import Answer, CreatedBatch, IdempotencyHook, NewBatch, batch_row
from relay.batches.offload.submit import OffloadAtSubmit
from relay.batches.results import render_result, result_pages, status_view
from relay.batches.submission import StreamedSubmission, load_batch_body
from relay.domain.batch_record import BatchRecord, ItemState, ResultRow
from relay.domain.batches import (
    APIS,
    ENGINE_SHAPES,
    ITEM_STATES,
    mint_batch_id,
    validate_submission,
)
from relay.domain.times import rfc3339
from relay.errors import InvalidRequest, NotFound
from relay.http.spool import SpooledBody
from relay.payloads.base import PayloadStore, PayloadStores
from relay.request.auth import Principal
from relay.store.batch_queue import BatchStore, InTransaction
from relay.store.engine import DuplicateRow
from relay.telemetry.tracing import batch_created
from relay.usage.event import cancelled_event

log = logging.getLogger("relay.batches")


class BatchNotFound(NotFound):
    def __init__(self) -> None:
        super().__init__("batch not found")


class BatchService:
    def __init__(
        self,
        store: BatchStore,
        payloads: PayloadStores,
        *,
        max_items: int,
        stop_running: Callable[[str], Awaitable[object]] | None = None,
        max_json_depth: int = DEFAULT_MAX_DEPTH,
        on_cancelled: Callable[[int], object] | None = None,
        offload: OffloadAtSubmit | None = None,
    ) -> None:
        self._offload = offload  # SPEC §22: decides at submit whether a provider runs the batch
        self._store = store  # its finish hooks run when a create (no items) or a cancel finishes a batch
        self._max_depth = max_json_depth
        self._payloads = payloads
        self._max_items = max_items
        self._stop_running = stop_running
        # Told how many waiting items a cancel finished here (relay_batch_items_finished_total counts
        # every final state this replica writes, bulk cancels included).
        self._on_cancelled = on_cancelled

    async def submit(
        self, principal: Principal, raw: bytes | SpooledBody, *, idempotency: IdempotencyHook | None = None
    ) -> Answer:
        """SPEC §10.1: 202 ``{"id", "status": "queued", "total_items"}`` once everything is durable
        (with ``idempotency``, or the first answer of a concurrent duplicate). A spooled body (over
        1 MiB, ``relay.http.spool``) is parsed item by item while its bodies are written
        (``relay.batches.submission``): a million items never sit in memory."""

        def render(created: CreatedBatch) -> Answer:
            body = {"id": created.id, "status": "queued", "total_items": created.total_items}
            return Answer(202, orjson.dumps(body))

        if isinstance(raw, SpooledBody):
            with raw.open() as source:
                streamed = StreamedSubmission(source, self._max_items, self._max_depth)
                new = NewBatch(api="relay", shape="openai", requests=(), streamed=streamed)
                return await self.create(principal, new, render, idempotency=idempotency)
        # Parsing and validating 50 000 items takes a second or more of CPU: off the event loop.
        shape, requests = await asyncio.to_thread(self._validate, raw)
        return await self.create(
            principal, NewBatch(api="relay", shape=shape, requests=requests), render, idempotency=idempotency
        )

    async def create(
        self,
        principal: Principal,
        new: NewBatch,
        render: Callable[[CreatedBatch], Answer],
        *,
        idempotency: IdempotencyHook | None = None,
    ) -> Answer:
        """Any API's create (the engine's one submit): the items' request bodies go to the current
        payload store first, then the batch and all its items in one transaction (with the
        idempotency row, when given, holding ``render``'s answer); returns that answer. A concurrent
        duplicate of the same owner and key writes nothing and returns the first answer (or 409). Call
        :meth:`replay` before, to answer a plain repeat without doing any work."""
        if new.shape not in ENGINE_SHAPES:
            raise ValueError(f"{new.shape!r} is not an item shape the engine runs")
        if new.streamed is not None and (new.requests or new.custom_ids is not None):
            raise ValueError("a streamed create carries its items in the stream only")
        if new.api not in APIS:
            raise ValueError(f"unknown batch API {new.api!r}")
        batch_id = mint_batch_id(new.api)
        created_at = datetime.now(UTC)
        store = self._payloads.current
        total = len(new.requests)
        watch = self._offload.watch(principal, new.api) if self._offload is not None else None
        offload: dict[str, Any] = {}
        if total or new.streamed is not None:
            bodies: Iterable[bytes] = (
                (body if isinstance(body, bytes) else orjson.dumps(body) for body in new.requests)
                if new.streamed is None
                else new.streamed  # refuses (BatchRejected) from inside the write: nothing stays
            )
            try:
                total = await store.write_requests(batch_id, watch.through(bodies) if watch else bodies)
                if new.streamed is not None:
                    new = replace(new, shape=new.streamed.shape, custom_ids=new.streamed.custom_ids)
                offload = await watch.columns(new.shape) if watch else {}  # SPEC §22 (BudgetExceeded)
            except BaseException:
                await self.discard(store, batch_id)  # what a part-write left
                raise
        row = batch_row(principal, batch_id, created_at, new, store.name) | offload
        row["trace_parent"] = batch_created(batch_id, total)  # SPEC §18: its items link to this span
        answer = render(CreatedBatch(batch_id, created_at, total))

        async def insert(first: InTransaction | None) -> None:
            await self._store.insert_batch(row, total, custom_ids=new.custom_ids, first=first)

        answered = await self.commit_once(store, batch_id, insert, answer, created_at, idempotency)
        log.info(
            "batch %s submitted: %d items (%s API)",
            batch_id,
            total,
            new.api,
            extra={
                "event": "batch_submitted",
                "batch_id": batch_id,
                "items": total,
                "api": new.api,
                "policy_id": principal.policy.id,
                "project_id": principal.project_id,
            },
        )
        return answered

    async def commit_once(
        self,
        store: PayloadStore,
        batch_id: str,
        insert: Callable[[InTransaction | None], Awaitable[None]],
        answer: Answer,
        created_at: datetime,
        idempotency: IdempotencyHook | None,
    ) -> Answer:
        """Run ``insert`` (the batch's one transaction, with the idempotency row when given) and answer
        ``answer``; a concurrent duplicate of the same owner and key gets the first answer, and the
        bodies already written to ``store`` under ``batch_id`` go when the batch did not commit."""
        first = idempotency.writer(answer, created_at) if idempotency is not None else None
        try:
            await insert(first)
        except DuplicateRow:
            # Nothing of this batch committed: its bodies go (a concurrent duplicate's loser, say).
            await self.discard(store, batch_id)
            if idempotency is None:
                raise
            prior = await idempotency.first_answer(
                self._store.engine
            )  # a concurrent duplicate committed first
            if prior is None:
                raise
            return prior
        except BaseException:
            await self.discard(store, batch_id)  # unless the commit happened after all
            raise
        return answer

    async def discard(self, store: PayloadStore, batch_id: str) -> None:
        """Remove the request bodies of a create whose batch did not commit, once the database shows
        no such batch (a failure at COMMIT may have committed it; an IntegrityError may be an id
        another batch has). Best effort: when it cannot be done (the database is down), the bodies
        stay, unreferenced."""
        try:
            if await self._store.exists(batch_id):
                return
            await store.discard_requests(batch_id)
        except Exception as exc:
            log.warning(
                "could not remove the request bodies of uncommitted batch %s (%s)",
                batch_id,
                type(exc).__name__,
            )

    def _validate(self, raw: bytes) -> tuple[str, list[Any]]:
        """Parse and validate a submission (:class:`BatchRejected`, nothing written); ``(shape,
        requests)``. Runs in a worker thread."""
        # Each item may nest as deep as a live body; the envelope adds two levels.
        invalid = "the body must be a JSON object with shape and requests"
        return validate_submission(load_batch_body(raw, self._max_depth + 2, invalid), self._max_items)

    @property
    def store(self) -> BatchStore:
        """The batch queue (``relay.batches.retry`` writes through it)."""
        return self._store

    @property
    def payloads(self) -> PayloadStores:
        return self._payloads

    async def replay(self, claim: IdempotencyHook) -> Answer | None:
        """The first answer to this idempotent create, to send again (None: create); 409 when the key
        was used with another request (SPEC §10.10)."""
        return await claim.first_answer(self._store.engine)

    async def list_owned(
        self, owner: str, limit: int, after: str | None = None, *, api: str | None = None
    ) -> dict[str, Any]:
        """SPEC §10.10: the owner's batches of every API (or of ``api``), newest first, ``limit`` per
        page after the batch ``after`` (the previous page's ``next_cursor``; 400 naming ``after`` when it
        is not one of the owner's batches). Three queries whatever the page size."""
        page = await self._store.owner_page(owner, limit=limit, after=after, api=api)
        if page is None:
            raise InvalidRequest("after must be the ID of one of your batches (a next_cursor)")
        rows, more, counts = page
        batches = [
            {
                "ID": row["id"],
                "InboundShape": row["inbound_shape"],
                "Status": row["status"],
                "TotalItems": row["total_items"],
                "CreatedAt": rfc3339(row["created_at"]),
                "CompletedAt": rfc3339(row["completed_at"]),
                "counts": {
                    state: counts[row["id"]][state] for state in ITEM_STATES if state in counts[row["id"]]
                },
            }
            for row in rows
        ]
        return {"batches": batches, "next_cursor": rows[-1]["id"] if more and rows else None}

    async def owned(self, owner: str, batch_id: str) -> BatchRecord:
        record = await self._store.batch_record(batch_id)
        if record is None or record.owner != owner:
            raise BatchNotFound()
        return record

    async def record(self, batch_id: str) -> BatchRecord:
        """Any owner's batch (the admin's and the dashboard's reads; callers check their scope)."""
        record = await self._store.batch_record(batch_id)
        if record is None:
            raise BatchNotFound()
        return record

    async def item_states(self, batch_id: str, limit: int) -> list[ItemState]:
        """The first ``limit`` items' states in idx order (the §10.2 ``items``), for any owner's batch:
        one keyset page, so a million-item batch's page reads ``limit`` rows, not a million."""
        if await self._store.batch_record(batch_id) is None:
            raise BatchNotFound()
        rows = await self._store.result_rows(batch_id, after_idx=-1, limit=limit)
        return [ItemState(row.idx, row.state) for row in rows]

    async def status(self, owner: str, batch_id: str, *, items: bool = True) -> dict[str, Any]:
        """SPEC §10.2 (:func:`relay.batches.results.status_view`) of the owner's batch."""
        view = await self._store.batch_view(batch_id, owner, items=items)  # owner first (§10.8)
        if view is None or view.record.owner != owner:
            raise BatchNotFound()
        return status_view(view, items=items)

    async def results(self, record: BatchRecord) -> AsyncIterator[list[bytes]]:
        """Pages of serialized §10.3 result objects, in idx order (call :meth:`owned` first)."""
        async for page in self.result_pages(record):
            yield [render_result(row, body) for row, body in page]

    def result_pages(self, record: BatchRecord) -> AsyncIterator[list[tuple[ResultRow, bytes | None]]]:
        """Every item with its response body, a page at a time (see ``relay.batches.results``)."""
        return result_pages(self._store, self._payloads, record)

    async def cancel(self, owner: str, batch_id: str) -> dict[str, Any]:
        """SPEC §10.5: idempotent; available items cancelled now, this replica's running ones stopped."""
        return await self.cancel_record(await self.owned(owner, batch_id))

    async def cancel_any(self, batch_id: str, *, also: InTransaction | None = None) -> dict[str, Any]:
        """The admin's cancel (SPEC §11): any owner's batch, otherwise exactly as :meth:`cancel`;
        ``also`` runs in the transaction that cancels it (the control plane's audit entry)."""
        return await self.cancel_record(await self.record(batch_id), also=also)

    async def cancel_record(
        self, record: BatchRecord, *, also: InTransaction | None = None
    ) -> dict[str, Any]:
        cancelled = await self._store.cancel(
            record.id, events_for=lambda idxs: [cancelled_event(record, idx) for idx in idxs], also=also
        )
        if cancelled and self._on_cancelled is not None:
            self._on_cancelled(len(cancelled))
        log.info(
            "batch %s cancelled: %d waiting items cancelled, running ones stopping",
            record.id,
            len(cancelled),
            extra={
                "event": "batch_cancelled",
                "batch_id": record.id,
                "items": len(cancelled),
                "project_id": record.project_id,
            },
        )
        if self._stop_running is not None:
            await self._stop_running(record.id)
        return {"status": "cancelled"}
