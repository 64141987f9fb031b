"""A server span per HTTP request of an ASGI app that has no pipeline of its own to trace it: the batch
APIs, and the control plane's writes (SPEC §18)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from relay.telemetry.trace_context import TRACED_REQUEST

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import Tracer

# ASGI's callables, spelled out: this module sits below relay.http and names no web framework.
Scope = MutableMapping[str, Any]
ASGIApp = Any
WRITES = frozenset(("POST", "PUT", "PATCH", "DELETE"))


class TracedApp:
    """An ASGI app whose HTTP requests are server spans (the batch APIs, the control plane's writes)."""

    def __init__(self, tracer: Tracer, app: ASGIApp, writes_only: bool) -> None:
        self._tracer = tracer
        self._app = app
        self._writes_only = writes_only

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        method = scope.get("method", "")
        if scope["type"] != "http" or (self._writes_only and method not in WRITES):
            await self._app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in (b"traceparent", b"tracestate")
        }
        trace = self._tracer.request(
            f"{method} {path}", {"http.request.method": method, "url.path": path}, headers
        )
        answered: dict[str, Any] = {}

        async def traced_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answered["http.response.status_code"] = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"x-relay-request-id":
                        answered["relay.request_id"] = value.decode("latin-1")
            await send(message)

        token = TRACED_REQUEST.set(trace)
        try:
            await self._app(scope, receive, traced_send)
        finally:
            TRACED_REQUEST.reset(token)
            status = answered.setdefault("http.response.status_code", 500)
            trace.finish(answered, status >= 500)
