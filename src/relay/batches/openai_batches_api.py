"""The OpenAI Batches façade's HTTP face (SPEC §14 Batches): a raw-ASGI app mounted at
``/openai/v1/batches`` on the inference listener (``/v1/batches`` stays §10's).

Routes: ``POST`` (create; ``Idempotency-Key`` honoured, SPEC §10.10), ``GET`` (list, ``?limit&after``),
``GET /{id}``, ``POST /{id}/cancel``. Thin handlers: authenticate like every ``/v1`` route (creating
needs a usable policy; reading and cancelling one's batches a valid credential), call
:class:`relay.batches.openai_batches.OpenAIBatches`, render. Errors are OpenAI-shaped: a bad parameter
is a 400 whose ``param`` names it; an unknown or foreign id is the same 404 ``batch not found``.

What it deliberately does not know. The engine, files, ids and clocks (the service's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson
from starlette.types import Receive, Scope, Send

from relay.adapters import OPENAI, error_body
from relay.auth import authenticate, authenticate_owner
from relay.batches import idempotency
from relay.batches.api import list_params
from relay.batches.openai_batches import ROUTE, OpenAIBatches
from relay.batches.openai_errors import openai_error
from relay.domain.credentials import read_credential
from relay.domain.openai_batches import BadParam
from relay.errors import NotFound, RelayError
from relay.inference.wire import (
    error_headers,
    new_request_id,
    read_body,
    request_headers,
    require_method,
    send_bytes,
)
from relay.snapshot import Snapshot
from relay.store.outage import unavailable_or_internal

log = logging.getLogger("relay.batches")
PREFIX = "/openai/v1/batches"


class OpenAIBatchesApp:
    def __init__(self, service: OpenAIBatches, snapshot: Callable[[], Snapshot], max_bytes: int) -> None:
        self._service = service
        self._snapshot = snapshot
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request_id = new_request_id()
        method: str = scope["method"]
        parts = [p for p in scope["path"][len(PREFIX) :].split("/") if p]
        headers = request_headers(scope)
        try:
            credential = read_credential(headers.get("authorization"), headers.get("x-api-key"))
            snap = self._snapshot()
            if not parts:
                require_method(method, "GET", "POST")
                if method == "GET":
                    limit, after = list_params(scope, BadParam, "after must be the id of one of your batches")
                    page = await self._service.list(authenticate_owner(credential, snap), limit, after)
                    await _send(send, 200, orjson.dumps(page), request_id)
                    return
                principal = authenticate(credential, snap)  # creating needs a policy (SPEC §10.1)
                body = await read_body(
                    receive, scope, self._max_bytes, what="batch body", setting="RELAY_BATCH_MAX_BYTES"
                )
                claim = idempotency.claim_from(headers.get(idempotency.HEADER), principal.owner, ROUTE, body)
                answer = await self._service.replay(claim) if claim is not None else None
                if answer is None:
                    answer = await self._service.create(principal, body, idempotency=claim)
                await _send(send, answer.status_code, answer.body, request_id)
            elif len(parts) == 1:
                require_method(method, "GET")
                owner = authenticate_owner(credential, snap)
                await _send(
                    send, 200, orjson.dumps(await self._service.retrieve(owner, parts[0])), request_id
                )
            elif len(parts) == 2 and parts[1] == "cancel":
                require_method(method, "POST")
                owner = authenticate_owner(credential, snap)
                await _send(send, 200, orjson.dumps(await self._service.cancel(owner, parts[0])), request_id)
            else:
                raise NotFound(f"no route for {method} {scope['path']}")
        except RelayError as exc:
            await _send(send, exc.status, orjson.dumps(openai_error(exc)), request_id, error_headers(exc))
        except Exception as exc:
            status, code, message, extra = unavailable_or_internal(exc, f"openai batch request {request_id}")
            body_out = error_body(OPENAI, status=status, code=code, message=message)
            await _send(send, status, body_out, request_id, extra)


async def _send(
    send: Send, status: int, body: bytes, request_id: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_bytes(send, status, body, "application/json", request_id, extra or [])
