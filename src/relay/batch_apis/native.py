"""The batch API's HTTP face (SPEC §10.1–§10.5, §10.10): a small raw-ASGI app mounted at ``/v1/batches``.

Routes: ``POST /v1/batches`` (submit; ``Idempotency-Key`` honoured), ``GET /v1/batches`` (the caller's
batches of every API, ``?limit&after``), ``GET /v1/batches/{id}`` (status), ``GET
/v1/batches/{id}/results`` (``?format=jsonl`` for one result per line), ``POST
/v1/batches/{id}/cancel``, ``POST /v1/batches/{id}/retry`` (SPEC §17; ``Idempotency-Key`` honoured; a
retry batch's results are ``{"retry_of", "results"}``). Thin handlers: read, authenticate exactly like
inference (``authenticate(read_credential(...), snapshot)``), call
:class:`relay.batches.service.BatchService`, render. Errors are OpenAI-shaped like every ``/v1/*`` path,
``code`` included; a refused submission is ``{"error": {"type": "invalid_request_error", "code":
"invalid_request", "message"}}`` (SPEC §10.1). The route table, the 404/405 and the error answers are
``relay.batch_apis.router``' (one dispatcher for the four batch apps); body reading is
``relay.http.wire``'s, shared with the live plane.

What it deliberately does not know. Rate limits (none of these routes counts against them), the queue
and the payload files (the service's business). The body limit is ``RELAY_BATCH_MAX_BYTES``,
independent of the live ``RELAY_MAX_REQUEST_BYTES``. Results are streamed page by page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson
from starlette.types import Scope, Send

from relay.adapters import OPENAI
from relay.batch_apis.idempotency import IdempotencyClaim
from relay.batch_apis.router import ApiCall, ApiRoute, RoutedApp, create_once
from relay.batches.new_batch import Answer
from relay.batches.retry import BatchRetries
from relay.batches.service import BatchService
from relay.domain.batches import BatchRejected
from relay.errors import InvalidRequest, RelayError
from relay.http.errors import relay_error_body
from relay.http.spool import SpooledBody
from relay.http.wire import head, query_params
from relay.request.auth import Principal
from relay.snapshot import Snapshot

log = logging.getLogger("relay.batches")
PREFIX = "/v1/batches"
SUBMIT_ROUTE = "POST /v1/batches"  # the idempotency fingerprint's route (§14/§15 use their own)
LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MAX = 100


class BatchesApp(RoutedApp[ApiCall]):
    shape = OPENAI
    what = "batch request"

    def __init__(
        self,
        service: BatchService,
        snapshot: Callable[[], Snapshot],
        max_bytes: int,
        *,
        database_unavailable: Callable[[BaseException], bool],
    ) -> None:
        self._service = service
        self._retries = BatchRetries(service)
        self._max_bytes = max_bytes
        super().__init__(
            PREFIX,
            snapshot,
            [
                ApiRoute("GET", "", self._list),
                ApiRoute("POST", "", self._submit),
                ApiRoute("GET", "{id}", self._status),
                ApiRoute("GET", "{id}/results", self._results),
                ApiRoute("POST", "{id}/cancel", self._cancel),
                ApiRoute("POST", "{id}/retry", self._retry),
            ],
            database_unavailable,
        )

    async def _list(self, call: ApiCall) -> None:
        limit, after = list_params(call.scope)
        await call.json(200, orjson.dumps(await self._service.list_owned(call.owner(), limit, after)))

    async def _submit(self, call: ApiCall) -> None:
        await create_once(
            call, SUBMIT_ROUTE, self._max_bytes, self._service.replay, self._submit_or_refuse, spool=True
        )

    async def _submit_or_refuse(
        self, principal: Principal, raw: bytes | SpooledBody, *, idempotency: IdempotencyClaim | None
    ) -> Answer:
        try:
            return await self._service.submit(principal, raw, idempotency=idempotency)
        except BatchRejected as exc:
            # The live plane's body, ``code`` included: clients branch on it (SPEC §10.1 fixes the rest).
            return Answer(400, relay_error_body(OPENAI, InvalidRequest(str(exc))))

    async def _retry(self, call: ApiCall) -> None:
        """SPEC §17: a new batch of the original's failed items. An ``Idempotency-Key`` is fingerprinted
        with the original's id, so one key retries one batch."""

        async def retry(principal: Principal, raw: bytes, *, idempotency: IdempotencyClaim | None) -> Answer:
            return await self._retries.retry(principal, call.id, raw, idempotency=idempotency)

        route = f"{SUBMIT_ROUTE}/{call.id}/retry"
        await create_once(call, route, self._max_bytes, self._service.replay, retry)

    async def _status(self, call: ApiCall) -> None:
        view = await self._service.status(call.owner(), call.id, items=_items_param(call.scope))
        await call.json(200, orjson.dumps(view))

    async def _cancel(self, call: ApiCall) -> None:
        await call.json(200, orjson.dumps(await self._service.cancel(call.owner(), call.id)))

    async def _results(self, call: ApiCall) -> None:
        owner, batch_id, send = call.owner(), call.id, call.send
        fmt = (query_params(call.scope).get("format") or ["json"])[-1]
        if fmt not in ("json", "jsonl"):
            raise InvalidRequest("format must be json or jsonl")
        record = await self._service.owned(owner, batch_id)
        jsonl = fmt == "jsonl"
        content_type = "application/x-ndjson" if jsonl else "application/json"
        await send(head(200, content_type, call.request_id))
        first = True
        try:
            if not jsonl:
                retry_of = (
                    b"" if record.retry_of is None else b'"retry_of":' + orjson.dumps(record.retry_of) + b","
                )
                await _chunk(send, b"{" + retry_of + b'"results":[')
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


def list_params(
    scope: Scope,
    refuse: Callable[[str, str], RelayError] = lambda _param, message: InvalidRequest(message),
    after_message: str = "after must be a batch id (a next_cursor this API returned)",
) -> tuple[int, str | None]:
    """The batch lists' ``limit`` and ``after`` (SPEC §10.10 and §14 alike): ``limit`` 1–100 (default
    20; empty, 0, 101 or not an integer → 400 naming it), ``after`` a batch id of the caller's (checked
    by the service). ``refuse(param, message)`` builds the 400 in the caller's error shape."""
    query = query_params(scope)
    limit = LIST_LIMIT_DEFAULT
    if "limit" in query:
        raw = query["limit"][-1]
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= LIST_LIMIT_MAX:
            raise refuse("limit", f"limit must be an integer from 1 to {LIST_LIMIT_MAX}, got {raw!r}")
        limit = int(raw)
    after = query["after"][-1] if "after" in query else None
    if after == "":
        raise refuse("after", after_message)
    return limit, after


def _items_param(scope: Scope) -> bool:
    """``?items=false`` leaves the item list out of the status view (pollers want only the counts)."""
    value = (query_params(scope).get("items") or ["true"])[-1]
    if value not in ("true", "false"):
        raise InvalidRequest("items must be true or false")
    return value == "true"


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})
