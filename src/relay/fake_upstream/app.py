"""The ASGI app: routes a provider path to its renderer, after auth, validation and fault injection.

Request handling order: read and record the request, resolve the fault plan (per-request override, then
key, then global), sleep the latency, then either fail as planned or validate like the real provider
(key, ``anthropic-version``, JSON, ``model``) and answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from . import admin, anthropic, anthropic_batches, embeddings, openai_batches, openai_chat, responses
from .asgi import SSE_HEADERS, Headers, Receive, Scope, Send, drop_connection, lifespan, read_body, send_bytes
from .config import FakeConfig
from .errors import BadRequest, Shape, error_body
from .faults import Plan, body_overrides, header_overrides, plan_for
from .native_batches import NativeStore
from .stats import Recorder
from .token_counts import Api


@dataclass(frozen=True, slots=True)
class Route:
    api: Api
    shape: Shape
    render: Callable[[dict[str, Any], str], dict[str, Any]]
    render_stream: Callable[[dict[str, Any], str], list[bytes]] | None


ROUTES: dict[str, Route] = {
    "/v1/chat/completions": Route("chat", "openai", openai_chat.render, openai_chat.render_stream),
    "/v1/responses": Route("responses", "openai", responses.render, responses.render_stream),
    "/v1/messages": Route("messages", "anthropic", anthropic.render, anthropic.render_stream),
    "/v1/embeddings": Route("embeddings", "openai", embeddings.render, None),
}


@dataclass(slots=True)
class _Incoming:
    """What the single pass over the request headers extracted."""

    key: str | None = None
    anthropic_version: bool = False
    fake_headers: dict[bytes, bytes] | None = None


def _scan_headers(headers: Headers, shape: Shape) -> _Incoming:
    incoming = _Incoming()
    bearer: str | None = None
    api_key: str | None = None
    for name, value in headers:
        if name == b"authorization":
            if value[:7].lower() == b"bearer ":
                bearer = value[7:].strip().decode("latin-1") or None
        elif name == b"x-api-key":
            api_key = value.strip().decode("latin-1") or None
        elif name == b"anthropic-version":
            incoming.anthropic_version = True
        elif name.startswith(b"x-fake-"):
            if incoming.fake_headers is None:
                incoming.fake_headers = {}
            incoming.fake_headers[name] = value
    # Anthropic takes x-api-key (Bearer also works); OpenAI only knows Bearer.
    incoming.key = (api_key or bearer) if shape == "anthropic" else bearer
    return incoming


def _retry_after_header(seconds: float) -> tuple[bytes, bytes]:
    return (b"retry-after", (str(int(seconds)) if seconds == int(seconds) else f"{seconds:g}").encode())


class FakeUpstreamApp:
    """Holds the mutable state (runtime config, recorder); everything else is per request."""

    def __init__(self, config: FakeConfig) -> None:
        self.initial = config.copy()
        self.config = config.copy()
        self.recorder = Recorder()
        self.native = NativeStore()  # the native batch APIs' batches and files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await lifespan(receive, send)
            return
        route = ROUTES.get(scope["path"])
        if route is not None:
            await self._provider(route, scope, receive, send)
        elif scope["path"].startswith(("/v1/files", "/v1/batches")):
            await openai_batches.handle(self, scope, receive, send)
        elif scope["path"].startswith("/v1/messages/batches"):
            await anthropic_batches.handle(self, scope, receive, send)
        elif scope["path"].startswith("/__") or scope["path"] == "/health":
            await admin.handle(self, scope, receive, send)
        else:
            self.recorder.set_status(self._record(scope, await read_body(receive), None), 404)
            await send_bytes(send, 404, error_body("openai", 404, f"Invalid URL ({scope['path']})"))

    def _record(self, scope: Scope, body: Any, key: str | None) -> list[Any]:
        return self.recorder.record(scope["path"], scope["method"], scope["headers"], body, key)

    async def _provider(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await read_body(receive)
        incoming = _scan_headers(scope["headers"], route.shape)
        body: Any
        try:
            body = orjson.loads(raw)
            parsed = True
        except orjson.JSONDecodeError:
            body, parsed = raw.decode("utf-8", "replace"), False
        entry = self._record(scope, body, incoming.key)

        async def fail(status: int, message: str | None = None, code: str | None = None) -> None:
            self.recorder.set_status(entry, status)
            await send_bytes(send, status, error_body(route.shape, status, message, code))

        try:
            overrides = header_overrides(incoming.fake_headers) if incoming.fake_headers else {}
            if parsed and isinstance(body, dict) and "fake" in body:
                overrides = {**body_overrides(body["fake"]), **overrides}
        except BadRequest as exc:
            await fail(400, exc.message, exc.code)
            return
        plan = plan_for(self.config, incoming.key, overrides)
        if plan.latency_s > 0:
            await asyncio.sleep(plan.latency_s)

        if plan.disconnect:
            self.recorder.set_status(entry, None)
            await drop_connection(send, receive)
            return
        if plan.status is not None:
            self.recorder.set_status(entry, plan.status)
            extra = [_retry_after_header(plan.retry_after)] if plan.retry_after is not None else None
            await send_bytes(send, plan.status, error_body(route.shape, plan.status), extra)
            return

        if scope["method"] != "POST":
            await fail(405, f"Method {scope['method']} not allowed.")
        elif incoming.key is None:
            if route.shape == "anthropic":
                await fail(401, "x-api-key header is required")
            else:
                await fail(401, "You didn't provide an API key (Authorization: Bearer YOUR_KEY).")
        elif route.shape == "anthropic" and not incoming.anthropic_version:
            await fail(400, "anthropic-version: header is required")
        elif not parsed or not isinstance(body, dict):
            await fail(400, "We could not parse the JSON body of your request.", "invalid_json")
        elif not isinstance(body.get("model"), str) or not body["model"]:
            await fail(400, "you must provide a model parameter", "missing_model")
        else:
            try:
                if b"fake:drop_stream" in raw and plan.fail_after_chunks is None:
                    plan.fail_after_chunks = -3  # drop the connection before the stream's last 3 events
                await self._answer(route, body, plan, entry, send, receive)
            except BadRequest as exc:
                await fail(400, exc.message, exc.code)

    async def _answer(
        self, route: Route, body: dict[str, Any], plan: Plan, entry: list[Any], send: Send, receive: Receive
    ) -> None:
        model: str = body["model"]
        if body.get("stream") is True and route.render_stream is not None:
            events = route.render_stream(body, model)
            self.recorder.set_status(entry, 200)
            await self._stream(events, plan, send, receive)
            return
        payload = orjson.dumps(route.render(body, model))
        self.recorder.set_status(entry, 200)
        await send_bytes(send, 200, payload)

    @staticmethod
    async def _stream(events: list[bytes], plan: Plan, send: Send, receive: Receive) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        cut = plan.fail_after_chunks
        if cut is not None and cut < 0:
            cut = max(1, len(events) + cut)
        for index, event in enumerate(events):
            if cut is not None and index >= cut:
                await drop_connection(send, receive)
                return
            if index and plan.chunk_delay_s > 0:
                await asyncio.sleep(plan.chunk_delay_s)
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def build_app(config: FakeConfig | None = None) -> FakeUpstreamApp:
    """The ASGI app; serve it with any ASGI server (``serve`` uses uvicorn with uvloop and httptools)."""
    return FakeUpstreamApp(config or FakeConfig())
