"""A live inference request, from parsed body to the last byte: the story SPEC §7 tells.

parse → authenticate (snapshot) → route (§4) → admission (pass through / translate / refuse) →
``pipeline.run`` → answer (whole here; streamed chunk by chunk in ``streamed.py``) → after the last
byte: usage event to the background writer, one log line, metrics. No database call happens before
the response ends; the usage write is queued, never awaited.

Same-shape requests pass through untouched (no parse beyond ``model`` and ``stream``). A provider shape
routed to another adapter is translated (SPEC §7.3): request, whole response, stream event by event,
and upstream errors (status kept, message in the caller's error shape); ``/v1/generate`` (Relay's
canonical shape) is always translated. Embeddings for a non-``openai`` binding answer 400
``unsupported_binding``. All of it is decided per plan in ``LiveHandler._admission``, which also
decides whether a fallback model can serve the request (SPEC §4 step 5): a cross-shape fallback is
translated exactly as a cross-shape primary would be.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import Send

from relay.adapters import (
    CANONICAL,
    EMBEDDINGS,
    Dispatch,
    admit,
    canonical_from_response,
    canonical_to,
    parse_request,
    translate_error,
    translate_request,
    translate_response,
    wants_stream,
)
from relay.adapters.json_codec import DEFAULT_MAX_DEPTH
from relay.domain.credentials import read_credential
from relay.errors import InvalidRequest, RateLimited, RelayError
from relay.http.errors import error_body, relay_error_body, retry_after
from relay.http.wire import send_bytes
from relay.inference.cached import CachedAnswers
from relay.inference.guarded import blocked_body, guard_input, guard_whole
from relay.inference.recording import LiveRecorder
from relay.inference.streamed import StreamAnswers, answer_headers, answered_model
from relay.request.auth import Principal, authenticate
from relay.request.cache.step import CacheStep, Lookup
from relay.request.fallbacks import Admit, NotAdmitted, route
from relay.request.guardrails.step import GuardrailBlocked, GuardrailStep
from relay.request.guardrails.window import DEFAULT_WINDOW
from relay.request.pipeline import Call, Outcome, Pipeline
from relay.request.routing import Plan
from relay.snapshot import Snapshot

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import RequestTrace, Tracer

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
    translated: bool = False  # a provider shape translated to another adapter (SPEC §7.3)
    include_usage: bool = False  # an OpenAI chat caller asked for the stream's usage chunk
    error_shape: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    cache: Lookup | None = None  # where this request's answer is kept (SPEC §19); None: not stored
    cache_result: str = ""  # X-Relay-Cache: hit | miss | bypass; "" under a policy without a cache
    trace: RequestTrace | None = None  # the server span (SPEC §18), when tracing is on
    guardrails: list[dict[str, str]] = field(default_factory=list)  # SPEC §20: what blocked or redacted


MODEL_RECORD_CHARS = 256
"""Longest requested model name a usage event or log line keeps (a catalog name is at most 63)."""


class LiveHandler:
    def __init__(
        self,
        *,
        snapshot: Callable[[], Snapshot],
        pipeline: Pipeline,
        recorder: LiveRecorder,
        translate_max_tokens: int = 4096,
        max_json_depth: int = DEFAULT_MAX_DEPTH,
        cache: CacheStep | None = None,
        tracer: Tracer | None = None,
        guardrails: GuardrailStep | None = None,
        guardrail_window: int = DEFAULT_WINDOW,
    ) -> None:
        self._guardrails = guardrails
        self._tracer = tracer
        self._snapshot = snapshot
        self._cache = CachedAnswers(cache, pipeline, recorder) if cache is not None else None
        self._pipeline = pipeline
        self._recorder = recorder
        self._max_tokens = translate_max_tokens  # RELAY_TRANSLATE_DEFAULT_MAX_TOKENS
        self._max_depth = max_json_depth
        self._streams = StreamAnswers(recorder, self._cache, guardrails, guardrail_window)

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
        ctx = RequestContext(request_id, path, inbound, time.perf_counter(), body, error_shape=error_shape)
        tracer = self._tracer
        if tracer is not None:  # SPEC §18: the server span, a child of the caller's traceparent
            ctx.trace = tracer.request(
                "POST " + path,
                {"http.request.method": "POST", "url.path": path, "relay.request_id": request_id},
                headers,
            )
        snap = self._snapshot()
        try:
            request = parse_request(body, self._max_depth)
            model: str = request["model"]
            # What is recorded stays bounded (a 1 MB name would become a 1 MB row and log line).
            ctx.model = model if len(model) <= MODEL_RECORD_CHARS else model[:MODEL_RECORD_CHARS] + "…"
            authorization = headers.get("authorization")
            ctx.principal = authenticate(
                read_credential(authorization, headers.get("x-api-key")), snap, authorization=authorization
            )
            ctx.streamed = inbound != EMBEDDINGS and wants_stream(request)
            if ctx.principal.policy.input_guardrails:  # SPEC §20: before the cache and any upstream call
                assert self._guardrails is not None
                await guard_input(self._guardrails, ctx, request)
            try:
                chosen = route(ctx.principal.policy, ctx.model, snap, self._admission(ctx, inbound, request))
            except NotAdmitted as refused:  # the caller's shape cannot be sent to the model's plan
                ctx.plan = refused.plan
                raise refused.error from None
            ctx.plan = chosen.requested_plan
            if self._cache is not None and ctx.principal.policy.cache is not None:
                # The key is computed from the body this request is answered for: after input redaction.
                hit = await self._cache.lookup(ctx, request, headers)
                if hit is not None:
                    await self._cache.answer(ctx, hit, send, snap)
                    return
            call = Call.routed(ctx.principal, chosen, headers, stream=ctx.streamed, trace=ctx.trace)
            outcome = await self._pipeline.run(call)
            ctx.plan = call.plan  # the plan that answered: a fallback's, after one
            ctx.translated = inbound != CANONICAL and (
                admit(inbound, ctx.plan.binding.adapter, host=ctx.plan.host.name).dispatch
                is Dispatch.TRANSLATE
            )
        except RelayError as exc:
            await self._refuse(ctx, error_shape, exc, send, snap)
            return
        if outcome.chunks is None:
            await self._answer_whole(ctx, outcome, send, snap)
        else:
            await self._streams.answer(ctx, outcome, send, snap)

    def _admission(self, ctx: RequestContext, inbound: str, request: dict) -> Admit:
        """The one place a live request's wire shape meets a plan's adapter, for the primary plan and
        every fallback alike (SPEC §7.3, §4 step 5): same shape → as it is; canonical or another
        provider shape → translated; embeddings to another adapter → ``unsupported_binding``. A refusal
        (or a parameter the candidate's adapter cannot take) raises, which skips a fallback."""
        requested = ctx.model

        def admit_plan(plan: Plan) -> tuple[str, dict]:
            adapter = plan.binding.adapter
            admission = admit(inbound, adapter, host=plan.host.name)
            if admission.dispatch is Dispatch.REFUSE_BINDING:
                raise InvalidRequest(
                    f"model {requested!r} is bound with adapter {adapter}; {inbound} requests are only "
                    "served by openai bindings (embeddings are never translated)",
                    code="unsupported_binding",
                )
            if admission.dispatch is Dispatch.REFUSE_CROSS_SHAPE:  # an adapter admit does not know
                raise InvalidRequest(
                    f"model {requested!r} is bound with adapter {adapter}; "
                    f"{inbound} requests cannot be sent to it",
                    code="cross_shape_unsupported",
                )
            if admission.dispatch is Dispatch.PASS_THROUGH:
                return admission.wire_shape, request
            if inbound == CANONICAL:
                return admission.wire_shape, canonical_to(adapter, request)
            body, translated = translate_request(
                inbound, adapter, request, default_max_tokens=self._max_tokens
            )
            ctx.include_usage = translated.include_usage
            return admission.wire_shape, body

        return admit_plan

    async def _answer_whole(self, ctx: RequestContext, outcome: Outcome, send: Send, snap: Snapshot) -> None:
        body = outcome.body or b""
        if ctx.translated and ctx.plan is not None:
            body = self._translated_body(ctx, outcome, body)
        elif ctx.inbound_shape == CANONICAL and outcome.error_kind is not None:
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
                answered = answered_model(ctx, outcome)
                body = orjson.dumps(canonical_from_response(ctx.plan.binding.adapter, body, model=answered))
            except ValueError:  # a 2xx the adapter cannot read: the upstream broke its own contract
                outcome.status, outcome.error_kind = 502, "upstream_unreadable"
                body = error_body(
                    "openai", status=502, code="upstream_unreadable", message="upstream answer unreadable"
                )
                outcome.content_type = "application/json"
        if (
            ctx.principal is not None
            and ctx.principal.policy.output_guardrails
            and outcome.error_kind is None
            and 200 <= outcome.status < 300
        ):
            assert self._guardrails is not None
            checked = await guard_whole(self._guardrails, ctx, body)
            if isinstance(checked, GuardrailBlocked):  # never a 200; the upstream's answer is priced
                outcome.error_kind = checked.code
                blocked = blocked_body(ctx.error_shape, checked)
                await send_bytes(send, checked.status, blocked, "application/json", ctx.request_id)
                self._recorder.finished(ctx, outcome, snap, response_body=blocked, blocked=checked)
                return
            body = checked
        if ctx.cache is not None and outcome.error_kind is None and 200 <= outcome.status < 300:
            assert self._cache is not None
            await self._cache.keep(ctx, body, outcome.content_type, outcome.usage)
        await send_bytes(
            send, outcome.status, body, outcome.content_type, ctx.request_id, answer_headers(outcome, ctx)
        )
        self._recorder.finished(ctx, outcome, snap, response_body=body)

    @staticmethod
    def _translated_body(ctx: RequestContext, outcome: Outcome, body: bytes) -> bytes:
        """The caller's answer to a translated request: its response or its error shape (SPEC §7.3)."""
        assert ctx.plan is not None
        outcome.content_type = "application/json"
        if outcome.error_kind is not None:
            return translate_error(ctx.error_shape, outcome.status, body)
        try:
            return translate_response(
                ctx.plan.binding.adapter, ctx.inbound_shape, body, model=answered_model(ctx, outcome)
            )
        except ValueError:  # a 2xx the adapter cannot read: the upstream broke its own contract
            outcome.status, outcome.error_kind = 502, "upstream_unreadable"
            return error_body(
                ctx.error_shape, status=502, code="upstream_unreadable", message="upstream answer unreadable"
            )

    async def _refuse(
        self, ctx: RequestContext, shape: str, exc: RelayError, send: Send, snap: Snapshot
    ) -> None:
        extra: list[tuple[bytes, bytes]] = []
        if isinstance(exc, RateLimited):
            extra.append((b"retry-after", retry_after(exc)))
        body = blocked_body(shape, exc) if isinstance(exc, GuardrailBlocked) else relay_error_body(shape, exc)
        await send_bytes(send, exc.status, body, "application/json", ctx.request_id, extra)
        self._recorder.refused(ctx, exc, snap)
