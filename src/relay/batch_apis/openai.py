"""The OpenAI Batches façade's HTTP face (SPEC §14 Batches): a raw-ASGI app mounted at
``/openai/v1/batches`` on the inference listener (``/v1/batches`` stays §10's).

Routes: ``POST`` (create; ``Idempotency-Key`` honoured, SPEC §10.10), ``GET`` (list, ``?limit&after``),
``GET /{id}``, ``POST /{id}/cancel``. Thin handlers: authenticate like every ``/v1`` route (creating
needs a usable policy; reading and cancelling one's batches a valid credential), call
:class:`relay.batch_apis.openai_service.OpenAIBatches`, render. Errors are OpenAI-shaped: a bad parameter
is a 400 whose ``param`` names it; an unknown or foreign id is the same 404 ``batch not found``.
The route table, 404/405 and error answers are ``relay.batch_apis.router``'.

What it deliberately does not know. The engine, files, ids and clocks (the service's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson

from relay.adapters import OPENAI
from relay.batch_apis.native import list_params
from relay.batch_apis.openai_service import ROUTE, OpenAIBatches
from relay.batch_apis.router import ApiCall, ApiRoute, RoutedApp, create_once
from relay.domain.openai_batches import BadParam
from relay.errors import RelayError
from relay.http.errors import openai_api_error
from relay.snapshot import Snapshot

log = logging.getLogger("relay.batches")
PREFIX = "/openai/v1/batches"


class OpenAIBatchesApp(RoutedApp[ApiCall]):
    shape = OPENAI
    what = "openai batch request"

    def __init__(
        self,
        service: OpenAIBatches,
        snapshot: Callable[[], Snapshot],
        max_bytes: int,
        *,
        database_unavailable: Callable[[BaseException], bool],
    ) -> None:
        self._service = service
        self._max_bytes = max_bytes
        super().__init__(
            PREFIX,
            snapshot,
            [
                ApiRoute("GET", "", self._list),
                ApiRoute("POST", "", self._create),
                ApiRoute("GET", "{id}", self._retrieve),
                ApiRoute("POST", "{id}/cancel", self._cancel),
            ],
            database_unavailable,
        )

    def error_body(self, exc: RelayError) -> bytes:
        return openai_api_error(exc)

    async def _list(self, call: ApiCall) -> None:
        limit, after = list_params(call.scope, BadParam, "after must be the id of one of your batches")
        await call.json(200, orjson.dumps(await self._service.list(call.owner(), limit, after)))

    async def _create(self, call: ApiCall) -> None:
        await create_once(call, ROUTE, self._max_bytes, self._service.replay, self._service.create)

    async def _retrieve(self, call: ApiCall) -> None:
        await call.json(200, orjson.dumps(await self._service.retrieve(call.owner(), call.id)))

    async def _cancel(self, call: ApiCall) -> None:
        await call.json(200, orjson.dumps(await self._service.cancel(call.owner(), call.id)))
