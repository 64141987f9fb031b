"""The Anthropic Message Batches API's HTTP face (SPEC §15): a raw-ASGI app mounted at
``/anthropic/v1/messages/batches`` and its alias ``/v1/messages/batches`` on the inference listener.

Routes: ``POST`` (create; ``Idempotency-Key`` honoured), ``GET`` (list: ``limit``, ``before_id``,
``after_id``), ``GET /{id}``, ``POST /{id}/cancel``, ``DELETE /{id}``, ``GET /{id}/results`` (JSONL,
streamed page by page). Thin handlers over the one batch engine: authenticate like inference (a create
needs a usable policy; the rest a valid credential, ``authenticate_owner``, checked before the path's
404/405), read the parameters, call :class:`relay.batch_apis.anthropic_service.MessageBatches`, render.
Items are ``anthropic``-shape engine items with their ``custom_id``; the runner never knows this API
made them. The route table, 404/405 and error answers are ``relay.batch_apis.router``'.

What it deliberately does not know. How items run, ids and clocks (the engine's), the database and
the payload store (the service's).
Every error is Anthropic-shaped on both paths (``{"type": "error", "error": {"type", "message"}}``): an
unknown id, another owner's batch or a batch of another API are the same 404 ``batch not found``,
decided before any other work (SPEC §10.8).

Invariants. A refused create writes nothing (validation happens before the engine's one
transaction). ``results_url`` is ``RELAY_PUBLIC_URL`` (else the request's scheme and Host) +
``/anthropic/v1/messages/batches/{id}/results``, on either path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson
from starlette.types import Scope

from relay.adapters import ANTHROPIC
from relay.batch_apis.anthropic_service import MessageBatches
from relay.batch_apis.idempotency import IdempotencyKeyReused
from relay.batch_apis.router import ApiCall, ApiRoute, RoutedApp, create_once
from relay.domain.batches import BatchRejected
from relay.errors import InvalidRequest, RelayError
from relay.http.errors import error_body
from relay.http.wire import head, query_params
from relay.snapshot import Snapshot

log = logging.getLogger("relay.batches")
PREFIXES: Final = ("/anthropic/v1/messages/batches", "/v1/messages/batches")
CREATE_ROUTE: Final = "POST /anthropic/v1/messages/batches"  # the idempotency fingerprint's route
LIST_LIMIT: Final = (1, 1000)
LIST_LIMIT_DEFAULT: Final = 20


class MessageBatchesApp(RoutedApp[ApiCall]):
    shape = ANTHROPIC
    what = "message batch request"

    def __init__(
        self,
        service: MessageBatches,
        snapshot: Callable[[], Snapshot],
        *,
        max_bytes: int,
        prefix: str,
        public_url: str | None = None,
        database_unavailable: Callable[[BaseException], bool],
    ) -> None:
        self._service = service
        self._max_bytes = max_bytes
        self._public_url = public_url
        super().__init__(
            prefix,
            snapshot,
            [
                ApiRoute("GET", "", self._list),
                ApiRoute("POST", "", self._create),
                ApiRoute("GET", "{id}", self._get),
                ApiRoute("DELETE", "{id}", self._delete),
                ApiRoute("POST", "{id}/cancel", self._cancel),
                ApiRoute("GET", "{id}/results", self._results),
            ],
            database_unavailable,
        )

    def screen(self, call: ApiCall, parts: Sequence[str]) -> None:
        # A batch's paths need a valid credential before anything else: a 401 comes before a 404/405.
        if parts:
            call.owner()

    def error_body(self, exc: RelayError) -> bytes:
        # Anthropic's error object has no code field: an identifier a client must branch on (SPEC
        # §10.10's 409) leads the message instead, ``idempotency_key_reused: …``.
        message = f"{exc.code}: {exc.message}" if isinstance(exc, IdempotencyKeyReused) else exc.message
        return error_body(ANTHROPIC, status=exc.status, code=exc.code, message=message)

    def refusal(self, exc: Exception) -> RelayError | None:
        return InvalidRequest(str(exc)) if isinstance(exc, BatchRejected) else None

    def _base(self, call: ApiCall) -> str:
        return self._public_url or _request_base(call.scope, call.headers)

    async def _create(self, call: ApiCall) -> None:
        await create_once(
            call, CREATE_ROUTE, self._max_bytes, self._service.replay, self._service.create, spool=True
        )

    async def _list(self, call: ApiCall) -> None:
        owner = call.owner()
        query = query_params(call.scope)
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
        page = await self._service.list(owner, limit, after=after, before=before, base_url=self._base(call))
        await call.json(200, orjson.dumps(page))

    async def _get(self, call: ApiCall) -> None:
        await _answer(call, await self._service.get(call.owner(), call.id, self._base(call)))

    async def _delete(self, call: ApiCall) -> None:
        await _answer(call, await self._service.delete(call.owner(), call.id))

    async def _cancel(self, call: ApiCall) -> None:
        await _answer(call, await self._service.cancel(call.owner(), call.id, self._base(call)))

    async def _results(self, call: ApiCall) -> None:
        record = await self._service.ended(call.owner(), call.id)
        send = call.send
        await send(head(200, "application/x-jsonl", call.request_id))
        try:
            async for data in self._service.results(record):
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.info("results stream of %s ended early: client disconnected", record.id)
        except Exception:
            # Headers are out: the caller sees a truncated body, never a false "complete".
            log.exception("results stream of %s failed", record.id)
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _request_base(scope: Scope, headers: dict[str, str]) -> str:
    """``<scheme>://<Host>`` of the request (the server's address when it carries no Host)."""
    scheme = scope.get("scheme", "http")
    host = headers.get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scheme}://{host}"


async def _answer(call: ApiCall, payload: dict[str, Any]) -> None:
    await call.json(200, orjson.dumps(payload))
