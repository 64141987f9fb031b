"""The inference-plane ASGI app (SPEC §7): a plain route table in front of the live handlers.

Raw ASGI rather than a framework router: this is the hot path, and a dict lookup on the path plus
direct ``send`` calls cost a fraction of a request/response object stack. Every response carries
``X-Relay-Request-ID``. Errors use the caller's wire shape: Anthropic's on ``/anthropic/…``, OpenAI's on
``/openai/…`` and ``/v1/…`` (SPEC §7).

``/livez`` says the process serves HTTP; ``/healthz`` that it reaches its database, through a callable
the composition root hands in (the hot path never imports the store). Other path prefixes (the batch
API) are served by ASGI apps mounted by ``boot``.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

from relay.adapters import ANTHROPIC, CANONICAL, EMBEDDINGS, OPENAI, OPENAI_RESPONSES, error_body
from relay.auth import authenticate
from relay.catalog import Snapshot
from relay.domain.credentials import read_credential
from relay.errors import RelayError
from relay.inference.live import LiveHandler
from relay.inference.wire import json_response, read_body, request_headers, send_bytes
from relay.routing import granted_models

# path -> (inbound shape, error shape)
INFERENCE_ROUTES: Mapping[str, tuple[str, str]] = {
    "/openai/v1/chat/completions": (OPENAI, OPENAI),
    "/v1/chat/completions": (OPENAI, OPENAI),
    "/openai/v1/responses": (OPENAI_RESPONSES, OPENAI),
    "/v1/responses": (OPENAI_RESPONSES, OPENAI),
    "/openai/v1/embeddings": (EMBEDDINGS, OPENAI),
    "/v1/embeddings": (EMBEDDINGS, OPENAI),
    "/anthropic/v1/messages": (ANTHROPIC, ANTHROPIC),
    "/v1/messages": (ANTHROPIC, OPENAI),
    "/v1/generate": (CANONICAL, OPENAI),
}
MODEL_LIST_ROUTES = frozenset(("/v1/models", "/openai/v1/models"))


class InferenceApp:
    def __init__(
        self,
        *,
        live: LiveHandler,
        snapshot: Callable[[], Snapshot],
        database_ok: Callable[[], Awaitable[bool]],
        max_request_bytes: int,
        mounts: Mapping[str, ASGIApp] | None = None,
    ) -> None:
        self._live = live
        self._snapshot = snapshot
        self._database_ok = database_ok
        self._max_bytes = max_request_bytes
        self._mounts = dict(mounts or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is handled by boot, websockets are not served
        path: str = scope["path"]
        method: str = scope["method"]
        request_id = uuid.uuid4().hex
        route = INFERENCE_ROUTES.get(path)
        if route is not None:
            if method != "POST":
                await self._error(
                    send, route[1], RelayError("use POST", code="method_not_allowed", status=405), request_id
                )
                return
            try:
                body = await read_body(receive, scope, self._max_bytes)
            except RelayError as exc:
                await self._error(send, route[1], exc, request_id)
                return
            await self._live.handle(path, route[0], route[1], body, request_headers(scope), send, request_id)
            return
        if path in MODEL_LIST_ROUTES and method == "GET":
            await self._models(scope, send, request_id)
            return
        if path == "/livez":
            await json_response(send, 200, {"status": "ok"}, request_id)
            return
        if path == "/healthz":
            ok = await self._database_ok()
            body_out = (
                {"status": "ok", "database": "ok"}
                if ok
                else {"status": "unavailable", "database": "unreachable"}
            )
            await json_response(send, 200 if ok else 503, body_out, request_id)
            return
        for prefix, app in self._mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                await app(scope, receive, send)
                return
        shape = ANTHROPIC if path.startswith("/anthropic/") else OPENAI
        await self._error(
            send, shape, RelayError(f"no route for {method} {path}", code="not_found", status=404), request_id
        )

    async def _models(self, scope: Scope, send: Send, request_id: str) -> None:
        snap = self._snapshot()
        headers = request_headers(scope)
        try:
            principal = authenticate(
                read_credential(headers.get("authorization"), headers.get("x-api-key")), snap
            )
        except RelayError as exc:
            await self._error(send, OPENAI, exc, request_id)
            return
        data = [
            {"id": m.name, "object": "model", "created": 0, "owned_by": m.provider}
            for m in granted_models(principal.policy, snap)
        ]
        await json_response(send, 200, {"object": "list", "data": data}, request_id)

    @staticmethod
    async def _error(send: Send, shape: str, exc: RelayError, request_id: str) -> None:
        body = error_body(shape, status=exc.status, code=exc.code, message=exc.message)
        await send_bytes(send, exc.status, body, "application/json", request_id)
