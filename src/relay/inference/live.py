"""A live inference request, from parsed body to the last byte: the story SPEC §7 tells.

parse → authenticate (snapshot) → route (§4) → shape check → ``pipeline.run`` → answer (whole or
streamed chunk by chunk) → after the last byte: usage event to the background writer, one log line,
metrics. No database call happens before the response ends; the usage write is queued, never awaited.

Cross-shape requests answer 400 ``cross_shape_unsupported`` (translation between provider shapes is a
later feature); ``/v1/generate`` (Relay's canonical shape) is always translated. Both are decided in
``_admission``, which also decides whether a fallback model can serve the request (SPEC §4 step 5).
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
from relay.auth import Principal, authenticate
from relay.catalog import Snapshot
from relay.domain.credentials import read_credential
from relay.errors import InvalidRequest, RateLimited, RelayError
from relay.fallbacks import Admit, Route, fallbacks_for, reroute
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


def _admission(requested: str, inbound: str, request: dict) -> Admit:
    """The one place a live request's wire shape meets a plan's adapter (primary and fallbacks alike):
    same shape → as it is; canonical → translated; otherwise refused ``cross_shape_unsupported``,
    which makes a cross-shape fallback skipped. Cross-shape translation (SPEC §7.3) plugs in here."""

    def admit(plan: Plan) -> tuple[str, dict]:
        adapter = plan.binding.adapter
        if not can_dispatch(inbound, adapter):
            raise InvalidRequest(
                f"model {requested!r} is bound with adapter {adapter}; "
                f"{inbound} requests cannot be sent to it (no cross-shape translation)",
                code="cross_shape_unsupported",
            )
        if inbound == CANONICAL:
            return adapter, canonical_to(adapter, request)
        return inbound, request

    return admit


def _fallback_header(outcome: Outcome) -> list[tuple[bytes, bytes]]:
    if outcome.fallback_from is None:
        return []
    return [(b"x-relay-fallback-from", outcome.fallback_from.encode())]


class LiveHandler:
    def __init__(
        self, *, snapshot: Callable[[], Snapshot], pipeline: Pipeline, recorder: LiveRecorder
    ) -> None:
        self._snapshot = snapshot
        self._pipeline = pipeline
        self._recorder = recorder

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
            request = parse_request(body)
            ctx.model = request["model"]
            ctx.principal = authenticate(
                read_credential(headers.get("authorization"), headers.get("x-api-key")), snap
            )
            ctx.streamed = inbound != EMBEDDINGS and wants_stream(request)
            policy, admit = ctx.principal.policy, _admission(ctx.model, inbound, request)
            try:
                ctx.plan = resolve(policy, ctx.model, snap)
            except RelayError as exc:  # no_binding / no_keys move to a fallback, if the policy names one
                chosen = reroute(policy, ctx.model, snap, admit, exc)
            else:
                shape, upstream_body = admit(ctx.plan)
                chosen = Route(ctx.plan, shape, upstream_body, fallbacks_for(policy, ctx.model, snap, admit))
            call = Call(
                ctx.principal,
                chosen.plan,
                chosen.shape,
                chosen.body,
                headers,
                ctx.streamed,
                fallbacks=chosen.fallbacks,
                primary_error=chosen.primary_error,
                fallback_from=chosen.fallback_from,
            )
            outcome = await self._pipeline.run(call)
            ctx.plan = call.plan  # the plan that answered: a fallback's, after one
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
                answered = ctx.plan.model.name if outcome.fallback_from else ctx.model
                body = orjson.dumps(canonical_from_response(ctx.plan.binding.adapter, body, model=answered))
            except ValueError:  # a 2xx the adapter cannot read: the upstream broke its own contract
                outcome.status, outcome.error_kind = 502, "upstream_unreadable"
                body = error_body(
                    "openai", status=502, code="upstream_unreadable", message="upstream answer unreadable"
                )
                outcome.content_type = "application/json"
        await send_bytes(
            send, outcome.status, body, outcome.content_type, ctx.request_id, _fallback_header(outcome)
        )
        self._recorder.finished(ctx, outcome, snap, response_body=body)

    async def _answer_stream(self, ctx: RequestContext, outcome: Outcome, send: Send, snap: Snapshot) -> None:
        assert outcome.chunks is not None and ctx.plan is not None
        translate = CanonicalStream(ctx.plan.binding.adapter) if ctx.inbound_shape == CANONICAL else None
        capture = self._recorder.capture(ctx, snap)
        broken: str | None = None
        await send(
            head(
                outcome.status,
                "text/event-stream",
                ctx.request_id,
                [(b"cache-control", b"no-cache"), *_fallback_header(outcome)],
            )
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
