"""The inference-plane ASGI app (SPEC §7): a plain route table in front of the live handlers.

Raw ASGI rather than a framework router: this is the hot path, and a dict lookup on the path plus
direct ``send`` calls cost a fraction of a request/response object stack. Every response carries
``X-Relay-Request-ID``. Errors use the caller's wire shape: Anthropic's on ``/anthropic/…``, OpenAI's on
``/openai/…`` and ``/v1/…`` (SPEC §7).

``/livez`` says the process serves HTTP (liveness); ``/readyz`` that it can serve live traffic, i.e.
holds a catalog snapshot (readiness: true through a database outage, which live requests do not
notice); ``/healthz`` that it reaches its database, through a callable the composition root hands in
(the hot path never imports the store). Other path prefixes (the batch API) are served by ASGI apps
mounted by ``boot``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send

from relay.adapters import ANTHROPIC, CANONICAL, EMBEDDINGS, OPENAI, OPENAI_RESPONSES
from relay.domain.credentials import read_credential
from relay.errors import RelayError
from relay.http.errors import error_body, error_headers, relay_error_body
from relay.http.wire import (
    MethodNotAllowed,
    json_response,
    new_request_id,
    read_body,
    request_headers,
    send_bytes,
)
from relay.inference.live import LiveHandler
from relay.request.auth import authenticate
from relay.request.routing import granted_models
from relay.snapshot import Snapshot
from relay.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import Tracer

log = logging.getLogger("relay.request")

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


def error_shape_for(path: str) -> str:
    """The error shape of a path no route table names: Anthropic's below ``/anthropic/``, else OpenAI's."""
    return ANTHROPIC if path.startswith("/anthropic/") else OPENAI


CONTROL_PATHS: Final = ("/api/", "/ui/")
"""Paths only the control plane serves (with ``/ui`` and ``/metrics``)."""


def unmatched(method: str, path: str) -> RelayError:
    """The 404 of a path no route serves; a control-plane path (an admin client or a browser pointed
    at the inference port) is told where the control plane is (``wrong_plane``)."""
    if path.startswith(CONTROL_PATHS) or path in ("/ui", "/metrics"):
        return RelayError(
            f"this is Relay's inference plane: {method} {path[:200]} is served by the control plane "
            "(RELAY_CONTROL_PORT, default 8081)",
            code="wrong_plane",
            status=404,
        )
    return RelayError(f"no route for {method} {path}", code="not_found", status=404)


class InferenceApp:
    def __init__(
        self,
        *,
        live: LiveHandler,
        snapshot: Callable[[], Snapshot],
        database_ok: Callable[[], Awaitable[bool]],
        max_request_bytes: int,
        mounts: Mapping[str, ASGIApp] | None = None,
        metrics: Metrics | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self._metrics = metrics
        self._tracer = tracer  # SPEC §18: a live route's request refused here is a server span too
        self._live = live
        self._snapshot = snapshot
        self._database_ok = database_ok
        self._max_bytes = max_request_bytes
        self._mounts = dict(mounts or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is handled by boot, websockets are not served
        try:
            await self._serve(scope, receive, send)
        except Exception:
            # The last line of defence (SPEC §7: never text/plain, never a traceback to the caller): a
            # JSON 500 in the caller's shape if nothing was sent yet, else the stream just ends.
            log.exception("unhandled error on %s", scope.get("path", "?")[:256])
            request_id = new_request_id()
            shape = error_shape_for(scope.get("path", ""))
            body = error_body(shape, status=500, code="internal_error", message="internal error")
            try:
                await send_bytes(send, 500, body, "application/json", request_id, [(b"connection", b"close")])
            except Exception:
                pass  # the response had started: uvicorn closes the connection

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        request_id = new_request_id()
        started = time.perf_counter()
        route = INFERENCE_ROUTES.get(path)
        if route is not None:
            if method != "POST":
                await self._refused(scope, send, route[1], MethodNotAllowed("POST"), request_id, started)
                return
            try:
                body = await read_body(receive, scope, self._max_bytes)
            except RelayError as exc:
                await self._refused(scope, send, route[1], exc, request_id, started)
                return
            await self._live.handle(path, route[0], route[1], body, request_headers(scope), send, request_id)
            return
        if path in MODEL_LIST_ROUTES and method == "GET":
            await self._models(scope, send, request_id, started)
            return
        if path == "/livez":
            await json_response(send, 200, {"status": "ok"}, request_id)
            return
        if path == "/readyz":
            # Ready while live traffic can be served: a catalog snapshot is loaded. The database is not
            # asked: live requests never read it, so a database outage must not empty the Service.
            snap = self._snapshot()
            if snap.loaded_at > 0:
                await json_response(send, 200, {"status": "ready", "revision": snap.revision}, request_id)
            else:
                await json_response(send, 503, {"status": "not_ready", "snapshot": "not loaded"}, request_id)
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
        shape = error_shape_for(path)
        # Unknown paths share one label: the route label must not grow with whatever clients send.
        await self._error(send, shape, unmatched(method, path), request_id, "unmatched", started)

    async def _models(self, scope: Scope, send: Send, request_id: str, started: float) -> None:
        snap = self._snapshot()
        headers = request_headers(scope)
        try:
            authorization = headers.get("authorization")
            principal = authenticate(
                read_credential(authorization, headers.get("x-api-key")), snap, authorization=authorization
            )
        except RelayError as exc:
            await self._error(send, OPENAI, exc, request_id, scope["path"], started)
            return
        data = [
            {"id": m.name, "object": "model", "created": 0, "owned_by": m.provider}
            for m in granted_models(principal.policy, snap)
        ]
        await json_response(send, 200, {"object": "list", "data": data}, request_id)
        attribution = {
            "policy_id": principal.policy.id,
            "project_id": principal.project_id,
            "team_id": principal.team_id,
            "principal_id": principal.principal_id,
            "credential_kind": principal.credential_kind,
            "credential_id": principal.credential_id,
        }
        self._count(scope["path"], OPENAI, 200, request_id, started, attribution)

    async def _refused(
        self, scope: Scope, send: Send, shape: str, exc: RelayError, request_id: str, started: float
    ) -> None:
        """A live route's request refused before its body was read (405, 413, 408): answered, counted
        and logged like the rest, and a server span when tracing is on (SPEC §18)."""
        path: str = scope["path"]
        tracer = self._tracer
        if tracer is None:
            await self._error(send, shape, exc, request_id, path, started)
            return
        method: str = scope["method"]
        attributes = {"http.request.method": method, "url.path": path, "relay.request_id": request_id}
        trace = tracer.request(f"{method} {path}", attributes, request_headers(scope))
        fields = {"trace_id": trace.ids()[0], "span_id": trace.ids()[1]} if trace.sampled else {}
        await self._error(send, shape, exc, request_id, path, started, fields)
        trace.finish({"http.response.status_code": exc.status}, exc.status >= 500)

    async def _error(
        self,
        send: Send,
        shape: str,
        exc: RelayError,
        request_id: str,
        route: str,
        started: float,
        fields: dict[str, Any] | None = None,
    ) -> None:
        body = relay_error_body(shape, exc)
        extra = error_headers(exc)
        await send_bytes(send, exc.status, body, "application/json", request_id, extra)
        self._count(route, shape, exc.status, request_id, started, {"error": exc.code, **(fields or {})})

    def _count(
        self, route: str, shape: str, status: int, request_id: str, started: float, fields: dict[str, Any]
    ) -> None:
        """Answers that never reach the live handler are counted and logged here (SPEC §12)."""
        if self._metrics is not None:
            self._metrics.requests.labels(route, shape, str(status), "").inc()  # never routed: no model
        line = {"request_id": request_id, "route": route, "status": status, **fields}
        line["latency_ms"] = int((time.perf_counter() - started) * 1000)
        log.info("request", extra=line)
