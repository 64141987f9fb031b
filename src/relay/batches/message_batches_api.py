"""The Anthropic Message Batches API's HTTP face (SPEC §15): a raw-ASGI app mounted at
``/anthropic/v1/messages/batches`` and its alias ``/v1/messages/batches`` on the inference listener.

Routes: ``POST`` (create; ``Idempotency-Key`` honoured), ``GET`` (list: ``limit``, ``before_id``,
``after_id``), ``GET /{id}``, ``POST /{id}/cancel``, ``DELETE /{id}``, ``GET /{id}/results`` (JSONL,
streamed page by page). Thin handlers over the one batch engine: authenticate like inference (a create
needs a usable policy; the rest a valid credential, ``authenticate_owner``), validate
(``relay.batches.message_batches``), call :class:`relay.batches.service.BatchService`, render. Items
are ``anthropic``-shape engine items with their ``custom_id``; the runner never knows this API made them.

What it deliberately does not know. How items run, ids and clocks (the engine's), SQL (the store's).
Every error is Anthropic-shaped on both paths (``{"type": "error", "error": {"type", "message"}}``): an
unknown id, another owner's batch or a batch of another API are the same 404 ``batch not found``,
decided before any other work (SPEC §10.8).

Invariants. A refused create writes nothing (validation happens before the engine's one
transaction). ``results_url`` is ``RELAY_PUBLIC_URL`` (else the request's scheme and Host) +
``/anthropic/v1/messages/batches/{id}/results``, on either path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from starlette.types import Receive, Scope, Send

from relay.adapters import ANTHROPIC, error_body
from relay.adapters.json_codec import DEFAULT_MAX_DEPTH, JsonRefused, loads_input
from relay.auth import authenticate, authenticate_owner
from relay.batches import idempotency
from relay.batches.idempotency import Answer, IdempotencyKeyReused
from relay.batches.message_batches import (
    EXPIRES_AFTER,
    created_batch,
    message_batch,
    result_line,
    validate_create,
)
from relay.batches.service import BatchNotFound, BatchService, CreatedBatch, NewBatch
from relay.domain.batch_record import BatchRecord
from relay.domain.batches import BatchRejected
from relay.domain.credentials import read_credential
from relay.errors import InvalidRequest, NotFound, RelayError
from relay.inference.wire import (
    error_headers,
    head,
    new_request_id,
    query_params,
    read_body,
    request_headers,
    require_method,
    send_bytes,
)
from relay.snapshot import Snapshot
from relay.store import message_batches as store
from relay.store.batch_queue import record_from_row
from relay.store.batches import owner_page
from relay.store.outage import unavailable_or_internal

log = logging.getLogger("relay.batches")
PREFIXES: Final = ("/anthropic/v1/messages/batches", "/v1/messages/batches")
CREATE_ROUTE: Final = "POST /anthropic/v1/messages/batches"  # the idempotency fingerprint's route
API: Final = "anthropic"
LIST_LIMIT: Final = (1, 1000)
LIST_LIMIT_DEFAULT: Final = 20


class MessageBatchesApp:
    def __init__(
        self,
        service: BatchService,
        engine: AsyncEngine,
        snapshot: Callable[[], Snapshot],
        *,
        max_bytes: int,
        max_items: int,
        prefix: str,
        public_url: str | None = None,
        max_json_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self._service = service
        self._engine = engine
        self._snapshot = snapshot
        self._max_bytes = max_bytes
        self._max_items = max_items
        self._prefix = prefix
        self._public_url = public_url
        self._max_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request_id = new_request_id()
        method: str = scope["method"]
        parts = [p for p in scope["path"][len(self._prefix) :].split("/") if p]
        headers = request_headers(scope)
        try:
            credential = read_credential(headers.get("authorization"), headers.get("x-api-key"))
            snap = self._snapshot()
            base = self._public_url or _request_base(scope, headers)
            if not parts:
                require_method(method, "GET", "POST")
                if method == "GET":
                    page = await self._list(authenticate_owner(credential, snap), scope, base)
                    await _json(send, 200, orjson.dumps(page), request_id)
                    return
                principal = authenticate(credential, snap)  # creating needs a policy (SPEC §10.1)
                body = await read_body(
                    receive, scope, self._max_bytes, what="batch body", setting="RELAY_BATCH_MAX_BYTES"
                )
                claim = idempotency.claim_from(
                    headers.get(idempotency.HEADER), principal.owner, CREATE_ROUTE, body
                )
                answer = await self._service.replay(claim) if claim is not None else None
                if answer is None:
                    params, custom_ids = await asyncio.to_thread(self._validate, body)
                    new = NewBatch(
                        api=API,
                        shape="anthropic",
                        requests=params,
                        custom_ids=custom_ids,
                        # The engine's sweep expires it then. Shown as created_at + 24 h: the engine
                        # mints created_at microseconds later, far below the sweep's granularity.
                        expires_at=datetime.now(UTC) + EXPIRES_AFTER,
                    )
                    answer = await self._service.create(principal, new, _render, idempotency=claim)
                await _json(send, answer.status_code, answer.body, request_id)
                return
            owner = authenticate_owner(credential, snap)
            if len(parts) == 1:
                require_method(method, "GET", "DELETE")
                if method == "GET":
                    record = await self._owned(owner, parts[0])
                    await _json(send, 200, orjson.dumps(await self._render(record, base)), request_id)
                else:
                    await _json(send, 200, orjson.dumps(await self._delete(owner, parts[0])), request_id)
            elif len(parts) == 2 and parts[1] == "cancel":
                require_method(method, "POST")
                await self._service.cancel_record(await self._owned(owner, parts[0]))
                record = await self._owned(owner, parts[0])
                answer_body = await self._render(record, base, canceling=True)
                await _json(send, 200, orjson.dumps(answer_body), request_id)
            elif len(parts) == 2 and parts[1] == "results":
                require_method(method, "GET")
                await self._results(send, await self._owned(owner, parts[0]), request_id)
            else:
                raise NotFound(f"no route for {method} {scope['path']}")
        except BatchRejected as exc:
            await _error(send, InvalidRequest(str(exc)), request_id)
        except RelayError as exc:
            await _error(send, exc, request_id)
        except Exception as exc:
            # A database that is away is a JSON 503 the client retries, never a traceback (nothing was
            # half-written: every write is one transaction).
            status, code, message, extra = unavailable_or_internal(exc, f"message batch request {request_id}")
            body_out = error_body(ANTHROPIC, status=status, code=code, message=message)
            await send_bytes(send, status, body_out, "application/json", request_id, extra)

    def _validate(self, raw: bytes) -> tuple[list[dict[str, Any]], list[str]]:
        """Parse and validate a create (:class:`BatchRejected`, nothing written). In a worker thread:
        50 000 requests take a second or more of CPU."""
        try:
            # Each params may nest as deep as a live body; the envelope adds three levels.
            body = loads_input(raw, self._max_depth + 3, what="batch body")
        except JsonRefused as exc:
            raise BatchRejected(str(exc)) from None
        except ValueError:
            raise BatchRejected("the body must be a JSON object with requests") from None
        return validate_create(body, self._max_items)

    async def _owned(self, owner: str, batch_id: str) -> BatchRecord:
        """The owner's §15 batch; anything else (unknown, foreign, another API's) the same 404."""
        record = await self._service.owned(owner, batch_id)
        if record.api != API:
            raise BatchNotFound()
        return record

    async def _render(self, record: BatchRecord, base: str, *, canceling: bool = False) -> dict[str, Any]:
        async with self._engine.connect() as conn:
            counts = await store.request_counts(conn, [record.id])
        return message_batch(record, counts[record.id], base, canceling=canceling)

    async def _list(self, owner: str, scope: Scope, base: str) -> dict[str, Any]:
        query = query_params(scope)
        limit = LIST_LIMIT_DEFAULT
        if "limit" in query:
            raw = query["limit"][-1]
            if not (raw.isascii() and raw.isdigit()) or not LIST_LIMIT[0] <= int(raw) <= LIST_LIMIT[1]:
                raise InvalidRequest(f"limit: must be an integer from 1 to {LIST_LIMIT[1]}, got {raw!r}")
            limit = int(raw)
        before = query["before_id"][-1] if "before_id" in query else None
        after = query["after_id"][-1] if "after_id" in query else None
        if before is not None and after is not None:
            raise InvalidRequest("before_id: give before_id or after_id, not both")
        async with self._engine.connect() as conn:
            page = await store_page(conn, owner, limit, after=after, before=before)
            rows, more = page
            counts = await store.request_counts(conn, [row.id for row in rows])
        data = [message_batch(row, counts[row.id], base) for row in rows]
        return {
            "data": data,
            "has_more": more,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }

    async def _delete(self, owner: str, batch_id: str) -> dict[str, Any]:
        record = await self._owned(owner, batch_id)
        async with self._engine.begin() as conn:
            deleted = await store.delete_ended(conn, record.id)
        if not deleted:
            raise InvalidRequest(f"batch {record.id} is still in progress: cancel it, or wait until it ends")
        return {"id": record.id, "type": "message_batch_deleted"}

    async def _results(self, send: Send, record: BatchRecord, request_id: str) -> None:
        if record.completed_at is None:
            raise InvalidRequest(f"batch {record.id} has not ended yet: results are available once it has")
        await send(head(200, "application/x-jsonl", request_id))
        try:
            async for page in self._service.result_pages(record):
                data = b"".join(result_line(row, body) for row, body in page)
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.info("results stream of %s ended early: client disconnected", record.id)
        except Exception:
            # Headers are out: the caller sees a truncated body, never a false "complete".
            log.exception("results stream of %s failed", record.id)
            await send({"type": "http.response.body", "body": b"", "more_body": False})


async def store_page(
    conn: AsyncConnection, owner: str, limit: int, *, after: str | None, before: str | None
) -> tuple[list[BatchRecord], bool]:
    """The owner's §15 batches, newest first (400 naming the cursor when it is not one of them)."""
    page = await owner_page(conn, owner, limit=limit, after=after, before=before, api=API)
    if page is None:
        name = "after_id" if after is not None else "before_id"
        raise InvalidRequest(f"{name}: must be the id of one of your message batches")
    rows, more = page
    return [record_from_row(row) for row in rows], more


def _render(created: CreatedBatch) -> Answer:
    return Answer(200, orjson.dumps(created_batch(created.id, created.created_at, created.total_items)))


def _request_base(scope: Scope, headers: dict[str, str]) -> str:
    """``<scheme>://<Host>`` of the request (the server's address when it carries no Host)."""
    scheme = scope.get("scheme", "http")
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scheme}://{host}"


async def _error(send: Send, exc: RelayError, request_id: str) -> None:
    # Anthropic's error object has no code field: an identifier a client must branch on (SPEC §10.10's
    # 409) leads the message instead, ``idempotency_key_reused: …``.
    message = f"{exc.code}: {exc.message}" if isinstance(exc, IdempotencyKeyReused) else exc.message
    body = error_body(ANTHROPIC, status=exc.status, code=exc.code, message=message)
    await send_bytes(send, exc.status, body, "application/json", request_id, error_headers(exc))


async def _json(send: Send, status: int, body: bytes, request_id: str) -> None:
    await send_bytes(send, status, body, "application/json", request_id)
