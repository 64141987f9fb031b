"""The OpenAI Batches façade's services (SPEC §14 Batches): create, retrieve, list, cancel, and the Batch
object, over the one batch engine.

What it does. :meth:`OpenAIBatches.create` checks the parameters, then creates through
:meth:`BatchService.create` while it reads the caller's input file line by line and checks each line
(no worker needed; ``relay.batch_apis.openai_create``: bounded memory whatever the file's size): a valid
file becomes an engine batch of ``api`` ``openai`` with one item per line (``custom_id`` kept, ``batch_idx``
= the 0-based line among requests), ``expires_at`` = now + 24 h and ``api_status`` ``in_progress``; an
invalid one — its first bad line stops the write, nothing of it is kept, and the rest is checked for
the other errors — becomes a batch with no item, ``api_status`` ``failed`` and its ``errors``. The answer is
the Batch object reading ``validating`` (SPEC §14). :meth:`retrieve`, :meth:`list` and :meth:`cancel`
render the Batch object from the engine's row, its item counts and its usage events.

The façade's state (``api_status``): ``in_progress`` → ``finalizing`` (set by the finish hook, inside
the finishing transaction) → a finalizer's claim ``fin@<unix deadline>`` → ``completed`` |
``cancelled`` | ``expired`` (``relay.batch_apis.openai_finalizer``); or ``failed`` at create.
``cancelling`` is derived: a cancel was requested before the batch finished and its files are not
written yet. ``api_data`` holds ``endpoint``, ``input_file_id``, ``metadata``,
``output_expires_after_s``, ``errors``, and once written ``output_file_id``, ``error_file_id``,
``ended_at``.

What it deliberately does not know. HTTP (``relay.batch_apis.openai``), how items run, how
the files' bytes are stored.

Invariants. Only the owner's §14 batches are visible: anything else is ``batch not found``. Every
read costs a constant number of queries (the row, one GROUP BY of counts, one of usage).
"""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

from relay.batch_apis.files_service import FileService
from relay.batch_apis.idempotency import IdempotencyClaim
from relay.batch_apis.openai_create import ChunkReader, LinesRefused, StreamedLines
from relay.batches.new_batch import Answer, CreatedBatch, NewBatch
from relay.batches.service import BatchNotFound, BatchService
from relay.domain.batches import CANCELLED as ITEM_CANCELLED
from relay.domain.batches import COMPLETED as ITEM_COMPLETED
from relay.domain.batches import DISCARDED as ITEM_DISCARDED
from relay.domain.openai_batches import COMPLETION_WINDOW, BadParam, LineChecker, check_create
from relay.request.auth import Principal
from relay.store import batches as batch_store
from relay.store import facade_batches
from relay.store.catalog import Row

API: Final = "openai"
ROUTE: Final = "POST /openai/v1/batches"  # the idempotency fingerprint's route
WINDOW: Final = timedelta(hours=24)
IN_PROGRESS: Final = "in_progress"
FINALIZING: Final = "finalizing"
CLAIM_PREFIX: Final = "fin@"  # + the claim's deadline in Unix seconds (fits api_status' 16 characters)
FAILED: Final = "failed"
ENDED: Final = ("completed", "cancelled", "expired", FAILED)
READ_BYTES: Final = 1 << 20  # the input file is read this much at a time


def unix(value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp())


def cancel_requested(row: Row) -> bool:
    """A cancel came before the batch finished (a later one changes nothing)."""
    asked, finished = row["cancel_requested_at"], row["completed_at"]
    if asked is None:
        return False
    return finished is None or _aware(asked) <= _aware(finished)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def outcome_of(row: Row, *, expired: bool) -> str:
    """How a finished batch ends (SPEC §14): ``cancelled``; ``expired`` when its expiry cancelled an
    item (``expired``: ``batch_store.has_expired_items``), not merely because its last item ended
    after ``expires_at``; else ``completed``."""
    if cancel_requested(row):
        return "cancelled"
    return "expired" if expired else "completed"


def status_of(row: Row) -> str:
    status = row["api_status"]
    if status in ENDED:
        return str(status)
    if cancel_requested(row):
        return "cancelling"
    if status is None:  # made by the engine without this façade's state (only tests do)
        return IN_PROGRESS if row["completed_at"] is None else FINALIZING
    return IN_PROGRESS if status == IN_PROGRESS else FINALIZING


def batch_object(
    row: Row,
    counts: dict[str, int],
    usage: facade_batches.UsageTotals,
    *,
    status: str | None = None,
) -> dict[str, Any]:
    """SPEC §14's Batch object from the engine's row (``api_data`` included)."""
    data: dict[str, Any] = row["api_data"] or {}
    status = status or status_of(row)
    failed = row["api_status"] == FAILED
    created = unix(row["created_at"])
    ended = data.get("ended_at")
    completed = counts.get(ITEM_COMPLETED, 0)
    errors = data.get("errors")
    inputs, cached, outputs, reasoning = usage
    return {
        "id": row["id"],
        "object": "batch",
        "endpoint": data.get("endpoint"),
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": data.get("input_file_id"),
        "completion_window": COMPLETION_WINDOW,
        "status": status,
        "output_file_id": data.get("output_file_id"),
        "error_file_id": data.get("error_file_id"),
        "created_at": created,
        "in_progress_at": None if failed or status == "validating" else created,
        "expires_at": unix(row["expires_at"]),
        "finalizing_at": None if failed else unix(row["completed_at"]),
        "completed_at": ended if row["api_status"] == "completed" else None,
        "failed_at": created if failed and status != "validating" else None,
        "expired_at": ended if row["api_status"] == "expired" else None,
        "cancelling_at": unix(row["cancel_requested_at"]) if cancel_requested(row) else None,
        "cancelled_at": ended if row["api_status"] == "cancelled" else None,
        "request_counts": {
            "total": row["total_items"],
            "completed": completed,
            "failed": counts.get(ITEM_DISCARDED, 0) + counts.get(ITEM_CANCELLED, 0),
        },
        "metadata": data.get("metadata"),
        "usage": {
            "input_tokens": inputs,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": outputs,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": inputs + outputs,
        },
    }


class OpenAIBatches:
    def __init__(self, batches: BatchService, files: FileService, *, max_items: int) -> None:
        self._batches = batches
        self._files = files
        self._engine = files.engine
        self._max_items = max_items

    async def create(
        self, principal: Principal, raw: bytes, *, idempotency: IdempotencyClaim | None = None
    ) -> Answer:
        """SPEC §14: 200 with the Batch object reading ``validating`` (or the first answer again)."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadParam(None, "the body must be a JSON object") from None
        params = check_create(body)
        _, chunks = await self._files.content(principal.owner, params.input_file_id)  # 404 before any line
        data: dict[str, Any] = {
            "endpoint": params.endpoint,
            "input_file_id": params.input_file_id,
            "metadata": params.metadata,
            "output_expires_after_s": params.output_expires_after_s,
        }
        expires_at = datetime.now(UTC) + WINDOW

        def render(created: CreatedBatch) -> Answer:
            row = {
                "id": created.id,
                "created_at": created.created_at,
                "expires_at": expires_at,
                "completed_at": None,
                "cancel_requested_at": None,
                "api_status": None,
                "api_data": data,
                "total_items": created.total_items,
            }
            shown = batch_object(row, {}, facade_batches.UsageTotals(0, 0, 0), status="validating")
            return Answer(200, orjson.dumps(shown))

        reader = ChunkReader(chunks)
        checker = LineChecker(params.endpoint, self._max_items)
        lines = StreamedLines(io.BufferedReader(reader, READ_BYTES), checker, params.shape)
        try:
            valid = NewBatch(
                api=API,
                shape=params.shape,
                requests=(),
                expires_at=expires_at,
                api_status=IN_PROGRESS,
                api_data=data,
                streamed=lines,
            )
            try:
                return await self._batches.create(principal, valid, render, idempotency=idempotency)
            except LinesRefused:
                await asyncio.to_thread(lines.check_rest)  # the errors of every line, as a whole read
        finally:
            await reader.aclose()
        failed = NewBatch(
            api=API,
            shape=params.shape,
            requests=[],
            expires_at=expires_at,
            api_status=FAILED,
            api_data={**data, "errors": checker.errors()},
        )
        return await self._batches.create(principal, failed, render, idempotency=idempotency)

    async def replay(self, claim: IdempotencyClaim) -> Answer | None:
        """The first answer to this idempotent create, to send again (None: create; 409 on reuse)."""
        return await self._batches.replay(claim)

    async def _owned_row(self, owner: str, batch_id: str) -> Row:
        async with self._engine.connect() as conn:
            row = await batch_store.get_batch(conn, batch_id)
        if row is None or row["owner"] != owner or row["api"] != API:
            raise BatchNotFound()
        return row

    async def _render(self, rows: list[Row]) -> list[dict[str, Any]]:
        ids = [row["id"] for row in rows]
        async with self._engine.connect() as conn:
            counts = await batch_store.item_counts(conn, ids)
            usage = await facade_batches.usage_totals(conn, ids)
        return [batch_object(row, counts[row["id"]], usage[row["id"]]) for row in rows]

    async def retrieve(self, owner: str, batch_id: str) -> dict[str, Any]:
        return (await self._render([await self._owned_row(owner, batch_id)]))[0]

    async def list(self, owner: str, limit: int, after: str | None) -> dict[str, Any]:
        """SPEC §14: the owner's §14 batches, newest first, ``limit`` after the batch ``after``."""
        async with self._engine.connect() as conn:
            page = await batch_store.owner_page(conn, owner, limit=limit, after=after, api=API)
        if page is None:
            raise BadParam("after", "after must be the id of one of your batches")
        rows, more = page
        data = await self._render(rows)
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": more,
        }

    async def cancel(self, owner: str, batch_id: str) -> dict[str, Any]:
        """SPEC §14: waiting items cancelled now (as §10.5); the answer reads ``cancelling``. A batch
        that already ended is answered as it is."""
        row = await self._owned_row(owner, batch_id)
        if row["api_status"] in ENDED or (row["completed_at"] is not None and not cancel_requested(row)):
            return (await self._render([row]))[0]
        await self._batches.cancel(owner, batch_id)
        after = await self._owned_row(owner, batch_id)
        shown = (await self._render([after]))[0]
        shown["status"] = "cancelling"
        for key in ("completed_at", "cancelled_at", "expired_at"):
            shown[key] = None
        if shown["cancelling_at"] is None:
            shown["cancelling_at"] = unix(after["cancel_requested_at"])
        return shown
