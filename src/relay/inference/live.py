"""A live inference request, from parsed body to the last byte: the story SPEC §7 tells.

parse → authenticate (snapshot) → route (§4) → shape check → ``pipeline.run`` → answer (whole or
streamed chunk by chunk) → after the last byte: usage event to the background writer, one log line,
metrics. No database call happens before the response ends; the usage write is queued, never awaited.

Cross-shape requests answer 400 ``cross_shape_unsupported`` (translation between provider shapes is a
later feature); ``/v1/generate`` (Relay's canonical shape) is always translated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Send

from relay.adapters import (
    CANONICAL,
    EMBEDDINGS,
    CanonicalStream,
    can_dispatch,
    canonical_from_response,
    canonical_to,
    error_body,
    parse_request,
    wants_stream,
)
from relay.adapters.json_codec import DEFAULT_MAX_DEPTH
from relay.auth import Principal, authenticate
from relay.catalog import Snapshot
from relay.domain.credentials import read_credential
from relay.errors import InvalidRequest, RateLimited, RelayError
from relay.inference.recording import LiveRecorder
from relay.inference.wire import head, send_bytes
from relay.pipeline import Call, Outcome, Pipeline
from relay.routing import Plan, resolve

log = logging.getLogger("relay.request")


@dataclass(slots=True)
class RequestContext:
    """What is known about one request so far; becomes its usage event and log line."""

    request_id: str
    path: str
    inbound_shape: str
    started: float
    body: bytes
    principal: Principal | None = None
    plan: Plan | None = None
    model: str = ""
    streamed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


MODEL_RECORD_CHARS = 256
"""Longest requested model name a usage event or log line keeps (a catalog name is at most 63)."""


class LiveHandler:
    def __init__(
        self,
        *,
        snapshot: Callable[[], Snapshot],
        pipeline: Pipeline,
        recorder: LiveRecorder,
        max_json_depth: int = DEFAULT_MAX_DEPTH,
    ) -> None:
        self._snapshot = snapshot
        self._pipeline = pipeline
        self._recorder = recorder
        self._max_depth = max_json_depth

    async def handle(
        self,
        path: str,
        inbound: str,
        error_shape: str,
        body: bytes,
        headers: Mapping[str, str],
        send: Send,
        request_id: str,
    ) -> None:
        ctx = RequestContext(request_id, path, inbound, time.perf_counter(), body)
        snap = self._snapshot()
        try:
            request = parse_request(body, self._max_depth)
            model: str = request["model"]
            # What is recorded stays bounded (a 1 MB name would become a 1 MB row and log line).
            ctx.model = model if len(model) <= MODEL_RECORD_CHARS else model[:MODEL_RECORD_CHARS] + "…"
            ctx.principal = authenticate(
                read_credential(headers.get("authorization"), headers.get("x-api-key")), snap
            )
            ctx.plan = resolve(ctx.principal.policy, ctx.model, snap)
            adapter = ctx.plan.binding.adapter
            if not can_dispatch(inbound, adapter):
                raise InvalidRequest(
                    f"model {ctx.model!r} is bound with adapter {adapter}; "
                    f"{inbound} requests cannot be sent to it (no cross-shape translation)",
                    code="cross_shape_unsupported",
                )
            shape = adapter if inbound == CANONICAL else inbound
            upstream_body = canonical_to(adapter, request) if inbound == CANONICAL else request
            ctx.streamed = inbound != EMBEDDINGS and wants_stream(request)
            outcome = await self._pipeline.run(
                Call(ctx.principal, ctx.plan, shape, upstream_body, headers, ctx.streamed)
            )
        except RelayError as exc:
            await self._refuse(ctx, error_shape, exc, send, snap)
            return
        if outcome.chunks is None:
            await self._answer_whole(ctx, outcome, send, snap)
        else:
            await self._answer_stream(ctx, outcome, send, snap)

    async def _answer_whole(self, ctx: RequestContext, outcome: Outcome, send: Send, snap: Snapshot) -> None:
        body = outcome.body or b""
        if ctx.inbound_shape == CANONICAL and outcome.error_kind is not None:
            # /v1/* errors are OpenAI-shaped (SPEC §7), whatever shape the upstream answered in.
            body = error_body(
                "openai",
                status=outcome.status,
                code="upstream_error",
                message=f"upstream returned {outcome.status}",
            )
            outcome.content_type = "application/json"
        elif ctx.inbound_shape == CANONICAL and ctx.plan is not None:
            try:
                body = orjson.dumps(canonical_from_response(ctx.plan.binding.adapter, body, model=ctx.model))
            except ValueError:  # a 2xx the adapter cannot read: the upstream broke its own contract
                outcome.status, outcome.error_kind = 502, "upstream_unreadable"
                body = error_body(
                    "openai", status=502, code="upstream_unreadable", message="upstream answer unreadable"
                )
                outcome.content_type = "application/json"
        await send_bytes(send, outcome.status, body, outcome.content_type, ctx.request_id)
        self._recorder.finished(ctx, outcome, snap, response_body=body)

    async def _answer_stream(self, ctx: RequestContext, outcome: Outcome, send: Send, snap: Snapshot) -> None:
        assert outcome.chunks is not None and ctx.plan is not None
        translate = CanonicalStream(ctx.plan.binding.adapter) if ctx.inbound_shape == CANONICAL else None
        capture = self._recorder.capture(ctx, snap)
        broken: str | None = None
        await send(
            head(outcome.status, "text/event-stream", ctx.request_id, [(b"cache-control", b"no-cache")])
        )
        try:
            async for chunk in outcome.chunks:
                out = translate.feed(chunk) if translate is not None else chunk
                if out:
                    if capture is not None:
                        capture.add(out)
                    await send({"type": "http.response.body", "body": out, "more_body": True})
            if translate is not None:
                tail = translate.finish()
                if tail:
                    await send({"type": "http.response.body", "body": tail, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except RelayError as exc:  # the upstream broke mid-stream: the caller sees the stream end
            broken = exc.message
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            broken = "client disconnected"
        finally:
            await outcome.chunks.aclose()  # type: ignore[attr-defined]
            await outcome.finish()
        self._recorder.finished(ctx, outcome, snap, stream_capture=capture, broken=broken)

    async def _refuse(
        self, ctx: RequestContext, shape: str, exc: RelayError, send: Send, snap: Snapshot
    ) -> None:
        extra: list[tuple[bytes, bytes]] = []
        if isinstance(exc, RateLimited):
            extra.append((b"retry-after", str(max(1, int(exc.retry_after + 0.999))).encode()))
        body = error_body(shape, status=exc.status, code=exc.code, message=exc.message)
        await send_bytes(send, exc.status, body, "application/json", ctx.request_id, extra)
        self._recorder.refused(ctx, exc, snap)
