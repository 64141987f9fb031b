"""Anthropic Message Batches (SPEC §15): what a MessageBatch and a result line look like (pure
functions), and :class:`MessageBatches`, the façade's service over the one engine.

What it does. A create's body is checked by ``relay.batch_apis.anthropic_create`` (whole, or read
request by request when spooled), each request's ``params`` an ``anthropic``-shape engine item with its
``custom_id``; :func:`message_batch` renders the MessageBatch object from a batch's record and its
request counts; ``relay.domain.message_batches.result_line`` renders one line of the results JSONL.

:class:`MessageBatches` creates (a body parsed whole is validated in a worker thread; a spooled one as
its bodies are written; then :meth:`BatchService.create`), reads, lists, cancels and deletes the
caller's §15 batches, and streams an ended batch's results. A delete is the one batch deletion of SPEC
§17 (``relay.batches.deleter.BatchDeleter``: items and their bodies a chunk at a time, then the row,
then the payload directory), refused with §15's 400 while the batch has not ended.

What it deliberately does not know. HTTP (``relay.batch_apis.anthropic`` renders) and SQL (the
store's). ``params`` are not inspected beyond "an object that does not ask for a stream": a bad one
ends ``errored`` when it runs (SPEC §15).

Invariants. Processing status is derived from the engine's own columns, never stored: ``ended`` once
the batch finished (``completed_at``), else ``canceling`` once a cancel was asked
(``cancel_requested_at``), else ``in_progress``. ``expires_at`` is ``created_at`` + 24 h; a result is
``expired`` exactly when the engine's expiry cancelled its item (error ``expired: …``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

from relay.batch_apis.anthropic_create import StreamedCreate, validate_create
from relay.batch_apis.idempotency import IdempotencyClaim
from relay.batches.deleter import BatchDeleter, BatchNotFinished
from relay.batches.new_batch import Answer, CreatedBatch, NewBatch
from relay.batches.service import BatchNotFound, BatchService
from relay.batches.submission import load_batch_body
from relay.domain.batch_record import BatchRecord
from relay.domain.message_batches import result_line
from relay.domain.times import rfc3339
from relay.errors import InvalidRequest
from relay.http.spool import SpooledBody
from relay.request.auth import Principal
from relay.store import message_batches as store
from relay.store.batch_queue import record_from_row
from relay.store.batches import owner_page
from relay.store.engine import Engine
from relay.store.message_batches import COUNT_KEYS

EXPIRES_AFTER: Final = timedelta(hours=24)
RESULTS_PATH: Final = "/anthropic/v1/messages/batches/{id}/results"
API: Final = "anthropic"
log = logging.getLogger("relay.retention")


def processing_status(record: BatchRecord) -> str:
    if record.completed_at is not None:
        return "ended"
    return "canceling" if record.cancel_requested_at is not None else "in_progress"


def results_url(base_url: str, batch_id: str) -> str:
    return base_url.rstrip("/") + RESULTS_PATH.format(id=batch_id)


def message_batch(
    record: BatchRecord, counts: dict[str, int], base_url: str, *, canceling: bool = False
) -> dict[str, Any]:
    """The MessageBatch object (SPEC §15). ``canceling``: the cancel's own answer, which always reads
    ``canceling`` (the batch reads ``ended`` once no request runs)."""
    status = "canceling" if canceling else processing_status(record)
    ended = status == "ended"
    return {
        "id": record.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": {key: counts.get(key, 0) for key in COUNT_KEYS},
        "created_at": rfc3339(record.created_at),
        "expires_at": rfc3339(record.created_at + EXPIRES_AFTER),
        "ended_at": rfc3339(record.completed_at) if ended else None,
        "cancel_initiated_at": rfc3339(record.cancel_requested_at),
        "archived_at": None,
        "results_url": results_url(base_url, record.id) if ended else None,
    }


def created_batch(batch_id: str, created_at: datetime, total: int) -> dict[str, Any]:
    """The MessageBatch a create answers: every request ``processing``, nothing ended."""
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": "in_progress",
        "request_counts": {key: total if key == "processing" else 0 for key in COUNT_KEYS},
        "created_at": rfc3339(created_at),
        "expires_at": rfc3339(created_at + EXPIRES_AFTER),
        "ended_at": None,
        "cancel_initiated_at": None,
        "archived_at": None,
        "results_url": None,
    }


class MessageBatches:
    """The §15 service: the owner's batches of ``api`` ``anthropic``; anything else (unknown, foreign,
    another API's) is the same 404 ``batch not found``, decided before any other work (SPEC §10.8)."""

    def __init__(
        self,
        engine: Engine,
        batches: BatchService,
        deleter: BatchDeleter,
        *,
        max_items: int,
        max_json_depth: int,
    ) -> None:
        self._engine = engine
        self._batches = batches
        self._deleter = deleter
        self._max_items = max_items
        self._max_depth = max_json_depth

    async def replay(self, claim: IdempotencyClaim) -> Answer | None:
        return await self._batches.replay(claim)

    async def create(
        self, principal: Principal, raw: bytes | SpooledBody, *, idempotency: IdempotencyClaim | None
    ) -> Answer:
        """The created MessageBatch (200), or :class:`BatchRejected` with nothing written. A spooled
        body (over 1 MiB, ``relay.http.spool``) is read request by request while the bodies are
        written, as a native submit's is (``relay.batches.submission``): never whole in memory."""
        # The engine's sweep expires it then. Shown as created_at + 24 h: the engine mints created_at
        # microseconds later, far below the sweep's granularity.
        expires_at = datetime.now(UTC) + EXPIRES_AFTER
        if isinstance(raw, SpooledBody):
            with raw.open() as source:
                streamed = StreamedCreate(source, self._max_items, self._max_depth + 1)
                new = NewBatch(
                    api=API, shape="anthropic", requests=(), expires_at=expires_at, streamed=streamed
                )
                return await self._batches.create(principal, new, _created, idempotency=idempotency)
        params, custom_ids = await asyncio.to_thread(self._validate, raw)
        new = NewBatch(
            api=API, shape="anthropic", requests=params, custom_ids=custom_ids, expires_at=expires_at
        )
        return await self._batches.create(principal, new, _created, idempotency=idempotency)

    def _validate(self, raw: bytes) -> tuple[list[dict[str, Any]], list[str]]:
        """In a worker thread: 50 000 requests take a second or more of CPU. Each params may nest as
        deep as a live body; the envelope adds three levels."""
        body = load_batch_body(raw, self._max_depth + 3, "the body must be a JSON object with requests")
        return validate_create(body, self._max_items)

    async def owned(self, owner: str, batch_id: str) -> BatchRecord:
        record = await self._batches.owned(owner, batch_id)
        if record.api != API:
            raise BatchNotFound()
        return record

    async def get(self, owner: str, batch_id: str, base_url: str) -> dict[str, Any]:
        return await self._render(await self.owned(owner, batch_id), base_url)

    async def cancel(self, owner: str, batch_id: str, base_url: str) -> dict[str, Any]:
        """Idempotent; the answer reads ``canceling`` (SPEC §15), a repeat included, but for a batch
        that had ended without a cancel: the cancel changes nothing there, and the answer shows it as
        it is (``ended``), as the OpenAI façade does."""
        record = await self.owned(owner, batch_id)
        if record.completed_at is not None and record.cancel_requested_at is None:
            return await self._render(record, base_url)
        await self._batches.cancel_record(record)
        return await self._render(await self.owned(owner, batch_id), base_url, canceling=True)

    async def _render(self, record: BatchRecord, base_url: str, *, canceling: bool = False) -> dict[str, Any]:
        async with self._engine.connect() as conn:
            counts = await store.request_counts(conn, [record.id])
        return message_batch(record, counts[record.id], base_url, canceling=canceling)

    async def list(
        self, owner: str, limit: int, *, after: str | None, before: str | None, base_url: str
    ) -> dict[str, Any]:
        """The owner's §15 batches, newest first (400 naming the cursor when it is not one of them)."""
        async with self._engine.connect() as conn:
            page = await owner_page(conn, owner, limit=limit, after=after, before=before, api=API)
            if page is None:
                name = "after_id" if after is not None else "before_id"
                raise InvalidRequest(f"{name}: must be the id of one of your message batches")
            rows, more = page
            counts = await store.request_counts(conn, [row["id"] for row in rows])
        data = [message_batch(record_from_row(row), counts[row["id"]], base_url) for row in rows]
        return {
            "data": data,
            "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    async def delete(self, owner: str, batch_id: str) -> dict[str, Any]:
        """An ended batch, deleted as SPEC §17 deletes one; 400 while it has not ended (nothing goes)."""
        record = await self.owned(owner, batch_id)
        try:
            deleted = await self._deleter.delete(record.id)
        except BatchNotFinished:
            raise InvalidRequest(
                f"batch {record.id} is still in progress: cancel it, or wait until it ends"
            ) from None
        log.info("deleted message batch %s at its owner's request: %s", record.id, deleted.describe())
        return {"id": record.id, "type": "message_batch_deleted"}

    async def ended(self, owner: str, batch_id: str) -> BatchRecord:
        """The owner's batch whose results can be read (400 until it has ended)."""
        record = await self.owned(owner, batch_id)
        if record.completed_at is None:
            raise InvalidRequest(f"batch {record.id} has not ended yet: results are available once it has")
        return record

    async def results(self, record: BatchRecord) -> AsyncIterator[bytes]:
        """The results JSONL of an ended batch (:meth:`ended`), a page of lines at a time."""
        async for page in self._batches.result_pages(record):
            yield b"".join(result_line(row, body) for row, body in page)


def _created(created: CreatedBatch) -> Answer:
    return Answer(200, orjson.dumps(created_batch(created.id, created.created_at, created.total_items)))
