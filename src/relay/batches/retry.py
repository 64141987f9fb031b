"""Retry a finished batch's failed items as a new batch (SPEC §17 "Retry").

What it does. :meth:`BatchRetries.retry` answers ``POST /v1/batches/{id}/retry``: the caller must own
the original (else :class:`~relay.batches.service.BatchNotFound`, as for any read, SPEC §10.8); the
body selects items (``relay.domain.batch_retry``: 400 naming the field); the original must be
finished (409 ``batch_not_finished``) and the selection non-empty (409 ``nothing_to_retry``). Then a
new §10 batch is written, owned by the caller under the policy governing its credential now, holding
the selected items in idx order with their original request bodies (and custom ids), and
``retry_of`` naming the original. Answers 202 ``{"id", "status": "queued", "total_items",
"retry_of"}``; an ``Idempotency-Key`` is honoured as for a submit (the caller passes the claim).

How the bodies travel. The retry batch keeps its bodies in the current payload store
(``RELAY_BATCH_PAYLOAD_STORE``) like any new batch. When the original's are in the database too, the
store copies the chunk rows server side in the transaction that writes the batch (no body passes
through Relay). Otherwise they are read from the original's store a page at a time
(:meth:`~relay.payloads.base.PayloadStore.read_requests`, one read per page) and streamed into the
current store's ``write_requests`` before the batch commits, exactly as a submit writes them: never
more than a page of bodies in memory, whatever the batch's size.

What it deliberately does not know. HTTP (``relay.batch_apis.native``), SQL (``relay.store.batch_queue``)
and which API made the original: a §14 or §15 batch is retried by its id like a §10 one.

Invariants. The original batch is never changed. The retry batch is all or nothing (one transaction;
bodies of a retry that did not commit are removed as a submit's are).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Final

import orjson

from relay.adapters.json_codec import JsonRefused, loads_input
from relay.batches.new_batch import Answer, IdempotencyHook, NewBatch, batch_row
from relay.batches.service import BatchService
from relay.domain.batch_retry import BatchNotFinished, NothingToRetry, RetrySelection, parse_retry_body
from relay.domain.batches import mint_batch_id
from relay.errors import InvalidRequest, Unavailable
from relay.payloads.base import PayloadStore
from relay.request.auth import Principal
from relay.store.batch_queue import InTransaction
from relay.telemetry.tracing import batch_created

COPY_PAGE: Final = 500  # bodies read and written per step when they cross payload stores


class BatchRetries:
    """The retry of SPEC §17 over the batch service's store and payload stores."""

    def __init__(self, service: BatchService) -> None:
        self._service = service

    async def retry(
        self, principal: Principal, batch_id: str, raw: bytes, *, idempotency: IdempotencyHook | None = None
    ) -> Answer:
        service, store = self._service, self._service.store
        original = await service.owned(principal.owner, batch_id)  # the owner before any other work
        chosen = parse_retry_body(_load(raw))
        if original.completed_at is None:
            raise BatchNotFinished(
                "the batch is not finished: only a batch whose every item is final can be retried"
            )
        total = await store.count_retry(original.id, chosen)
        if total == 0:
            raise NothingToRetry()
        new_id = mint_batch_id("relay")
        created_at = datetime.now(UTC)
        source = service.payloads.of(original.payload_store)
        target = service.payloads.current
        in_database = source.name == "database" and target.name == "database"
        if not in_database:
            try:
                written = await target.write_requests(new_id, self._copied(source, original.id, chosen))
            except BaseException as exc:
                await service.discard(target, new_id)
                if isinstance(exc, FileNotFoundError):  # SPEC §10.7: a payload directory not shared
                    raise Unavailable(
                        f"the request bodies of batch {original.id} cannot be read on this replica"
                        " (is RELAY_BATCH_PAYLOAD_DIR shared by every replica?)",
                        code="payload_unavailable",
                    ) from None
                raise
            if written != total:
                await service.discard(target, new_id)
                raise RuntimeError(f"copied {written} request bodies of {total}: the original changed")
        new = NewBatch(api="relay", shape=original.inbound_shape, requests=())
        row = {**batch_row(principal, new_id, created_at, new, target.name), "retry_of": original.id}
        row["trace_parent"] = batch_created(new_id, total)  # SPEC §18: traced like any create
        body = {"id": new_id, "status": "queued", "total_items": total, "retry_of": original.id}
        answer = Answer(202, orjson.dumps(body))

        async def insert(first: InTransaction | None) -> None:
            await store.insert_retry_batch(row, chosen, total, copy_request_chunks=in_database, first=first)

        return await service.commit_once(target, new_id, insert, answer, created_at, idempotency)

    def _copied(self, source: PayloadStore, batch_id: str, chosen: RetrySelection) -> Iterator[bytes]:
        """The selected items' request bodies in idx order, for a store's ``write_requests`` (which
        consumes it in a worker thread): each page of idxs and bodies is read on the event loop, one
        read per page, so only a page is ever held."""
        loop = asyncio.get_running_loop()
        store = self._service.store

        async def page(after: int) -> tuple[list[int], dict[int, bytes]]:
            idxs = await store.retry_idxs(batch_id, chosen, after_idx=after, limit=COPY_PAGE)
            return idxs, (await source.read_requests(batch_id, idxs) if idxs else {})

        def bodies() -> Iterator[bytes]:
            after = -1
            while True:
                idxs, found = asyncio.run_coroutine_threadsafe(page(after), loop).result()
                for idx in idxs:
                    yield found[idx]
                if len(idxs) < COPY_PAGE:
                    return
                after = idxs[-1]

        return bodies()


def _load(raw: bytes) -> object:
    """The retry's body as JSON (None when empty: every default), else a 400."""
    if not raw.strip():
        return None
    try:
        return loads_input(raw, 8, what="retry body")
    except (JsonRefused, ValueError):
        raise InvalidRequest("the body must be a JSON object with optional states and errors") from None
