"""The batch API's HTTP face (SPEC §10.1–§10.5): a small raw-ASGI app mounted at ``/v1/batches``.

Routes: ``POST /v1/batches`` (submit), ``GET /v1/batches/{id}`` (status), ``GET /v1/batches/{id}/results``
(``?format=jsonl`` for one result per line), ``POST /v1/batches/{id}/cancel``. Thin handlers: read,
authenticate exactly like inference (``authenticate(read_credential(...), snapshot)``), call
:class:`relay.batches.service.BatchService`, render. Errors are OpenAI-shaped like every ``/v1/*`` path;
a refused submission is ``{"error": {"type": "invalid_request_error", "message"}}`` (SPEC §10.1).

What it deliberately does not know. Rate limits (none of these routes counts against them), the queue
and the payload files (the service's business). The body limit is ``RELAY_BATCH_MAX_BYTES``,
independent of the live ``RELAY_MAX_REQUEST_BYTES``. Results are streamed page by page.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

import orjson
from starlette.types import Receive, Scope, Send

from relay.adapters import OPENAI, error_body
from relay.auth import authenticate, authenticate_owner
from relay.batches.service import BatchService
from relay.domain.batches import BatchRejected
from relay.domain.credentials import read_credential
from relay.errors import InvalidRequest, NotFound, RelayError
from relay.inference.wire import read_body
from relay.snapshot import Snapshot
from relay.store.outage import unavailable_or_internal

log = logging.getLogger("relay.batches")
PREFIX = "/v1/batches"


class BatchesApp:
    def __init__(self, service: BatchService, snapshot: Callable[[], Snapshot], max_bytes: int) -> None:
        self._service = service
        self._snapshot = snapshot
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request_id = uuid.uuid4().hex
        method: str = scope["method"]
        parts = [p for p in scope["path"][len(PREFIX) :].split("/") if p]
        try:
            credential, snap = self._credential(scope), self._snapshot()
            if not parts:
                _allow(method, "POST")
                principal = authenticate(credential, snap)  # submitting needs a policy (SPEC §10.1)
                body = await read_body(
                    receive, scope, self._max_bytes, what="batch body", setting="RELAY_BATCH_MAX_BYTES"
                )
                try:
                    answer = await self._service.submit(principal, body)
                except BatchRejected as exc:
                    payload = {"error": {"type": "invalid_request_error", "message": str(exc)}}
                    await _send(send, 400, orjson.dumps(payload), request_id)
                    return
                await _send(send, 202, orjson.dumps(answer), request_id)
            elif len(parts) == 1:
                _allow(method, "GET")
                owner = authenticate_owner(credential, snap)
                view = await self._service.status(owner, parts[0], items=_items_param(scope))
                await _send(send, 200, orjson.dumps(view), request_id)
            elif len(parts) == 2 and parts[1] == "results":
                _allow(method, "GET")
                await self._results(scope, send, authenticate_owner(credential, snap), parts[0], request_id)
            elif len(parts) == 2 and parts[1] == "cancel":
                _allow(method, "POST")
                owner = authenticate_owner(credential, snap)
                await _send(send, 200, orjson.dumps(await self._service.cancel(owner, parts[0])), request_id)
            else:
                raise NotFound(f"no route for {method} {scope['path']}")
        except RelayError as exc:
            body_out = error_body(OPENAI, status=exc.status, code=exc.code, message=exc.message)
            await _send(send, exc.status, body_out, request_id)
        except Exception as exc:
            # Degraded, not broken: a database that is away is a JSON 503 the client retries, never a
            # traceback (nothing was half-written: every write is one transaction).
            status, code, message, extra = unavailable_or_internal(exc, f"batch request {request_id}")
            body_out = error_body(OPENAI, status=status, code=code, message=message)
            await _send(send, status, body_out, request_id, extra)

    @staticmethod
    def _credential(scope: Scope) -> str | None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        return read_credential(headers.get("authorization"), headers.get("x-api-key"))

    async def _results(self, scope: Scope, send: Send, owner: str, batch_id: str, rid: str) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        fmt = (query.get("format") or ["json"])[-1]
        if fmt not in ("json", "jsonl"):
            raise InvalidRequest("format must be json or jsonl")
        record = await self._service.owned(owner, batch_id)
        jsonl = fmt == "jsonl"
        content_type = "application/x-ndjson" if jsonl else "application/json"
        await send(_head(200, content_type, rid))
        first = True
        try:
            if not jsonl:
                await _chunk(send, b'{"results":[')
            async for page in self._service.results(record):
                if jsonl:
                    data = b"".join(line + b"\n" for line in page)
                else:
                    data = (b"" if first else b",") + b",".join(page)
                first = False
                await _chunk(send, data)
            await send(
                {"type": "http.response.body", "body": b"]}" if not jsonl else b"", "more_body": False}
            )
        except OSError:
            log.info("results stream of %s ended early: client disconnected", batch_id)
        except Exception:
            # Headers are out: the caller sees a truncated body (invalid JSON), never a false "complete".
            log.exception("results stream of %s failed", batch_id)
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _items_param(scope: Scope) -> bool:
    """``?items=false`` leaves the item list out of the status view (pollers want only the counts)."""
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    value = (query.get("items") or ["true"])[-1]
    if value not in ("true", "false"):
        raise InvalidRequest("items must be true or false")
    return value == "true"


def _allow(method: str, expected: str) -> None:
    if method != expected:
        raise RelayError(f"use {expected}", code="method_not_allowed", status=405)


def _head(status: int, content_type: str, request_id: str, length: int | None = None) -> dict[str, Any]:
    headers = [(b"content-type", content_type.encode()), (b"x-relay-request-id", request_id.encode())]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http.response.start", "status": status, "headers": headers}


async def _send(
    send: Send, status: int, body: bytes, request_id: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    head = _head(status, "application/json", request_id, len(body))
    head["headers"] += extra or []
    await send(head)
    await send({"type": "http.response.body", "body": body})


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})
