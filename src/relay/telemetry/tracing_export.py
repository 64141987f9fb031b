"""Spans recorded for the OpenTelemetry SDK's batching processor and exported over OTLP/HTTP (SPEC §18);
imported only when tracing is on (``relay.telemetry.tracing.start_tracing``).

What it does: a parent-based ratio sampler (the SDK's ``TraceIdRatioBased`` bound; a caller's
``traceparent`` decides for its request), a ``BatchSpanProcessor`` (its ``OTEL_BSP_*`` settings are the
SDK's own) in front of the SDK's OTLP/HTTP protobuf exporter posting to ``<endpoint>/v1/traces``. A
span is queued when it ends; encoding and posting happen on the processor's thread, so a collector that
is down or hangs costs dropped spans (counted in ``relay_otel_spans_dropped_total``), never a request's
latency.

Why spans are recorded here rather than through the SDK's ``Tracer``: the SDK validates and copies
every attribute under a lock, consults the sampler through the context API and encodes each span as a
tree of protobuf objects — about 0.25 ms of CPU per traced request with one attempt, more than the
rest of the request. A request's spans are plain values here until they end (ids from one
``random.getrandbits`` call, attributes in a dict Relay fills with clean values, no context
variables), each becomes one SDK ``ReadableSpan`` handed to the processor, and the exporter writes
the wire format directly (``relay.telemetry.otlp_encode``). Unsampled requests create nothing but
their ids, which still propagate (``traceparent`` flags ``00``).

What it deliberately does not know: which requests are traced or what their attributes mean.
Invariant: nothing here raises into a request; the caller never learns whether a span was exported.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util.re import parse_env_headers

from relay.telemetry.otlp_encode import SpanEncoder
from relay.telemetry.trace_context import TRACED_REQUEST, DropCounter

log = logging.getLogger("relay.telemetry")

# ASGI's callables, spelled out: this module sits below relay.http and names no web framework.
Scope = MutableMapping[str, Any]
ASGIApp = Any
WRITES = frozenset(("POST", "PUT", "PATCH", "DELETE"))

_ERROR = Status(StatusCode.ERROR)
_UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_EMPTY_STATE = TraceState()
_TRACE_ID_LIMIT = TraceIdRatioBased.TRACE_ID_LIMIT
_HEX = frozenset("0123456789abcdef")
MAX_TRACESTATE_CHARS = 512  # W3C: at most 32 members; a longer header is dropped, not forwarded


def parse_traceparent(value: str | None, tracestate: str | None = None) -> SpanContext | None:
    """The remote parent a W3C ``traceparent`` names, or ``None`` when it is absent or malformed
    (then the request starts a new trace, as the W3C recommendation says)."""
    if not value or len(value) < 55:
        return None
    value = value.strip().lower()
    version, trace_hex, span_hex, flags_hex = value[:2], value[3:35], value[36:52], value[53:55]
    if (
        len(value) < 55
        or value[2] != "-"
        or value[35] != "-"
        or value[52] != "-"
        or version == "ff"
        or (version == "00" and len(value) != 55)
        or not _HEX.issuperset(value[:2] + trace_hex + span_hex + flags_hex)
    ):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    state = _EMPTY_STATE
    if tracestate and len(tracestate) <= MAX_TRACESTATE_CHARS:
        state = TraceState.from_header([tracestate])
    flags = _SAMPLED if int(flags_hex, 16) & 1 else _NOT_SAMPLED
    return SpanContext(trace_id, span_id, True, flags, state)


def _traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"


class _CountingExporter(SpanExporter):
    """The OTLP exporter (wire format written by :class:`SpanEncoder`), counting the spans of every
    batch it could not deliver."""

    def __init__(self, inner: OTLPSpanExporter, dropped: DropCounter) -> None:
        self._inner = inner
        self._dropped = dropped
        self._encoder = SpanEncoder()

    def _send(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client = getattr(self._inner, "_client", None)  # the SDK's HTTP client (retries, timeout)
        data = self._encoder.encode(spans) if client is not None else None
        if client is None or data is None or getattr(self._inner, "_shutdown", False):
            return self._inner.export(spans)  # the SDK's own path, encoder included
        return SpanExportResult.SUCCESS if client.export(data).success else SpanExportResult.FAILURE

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._send(spans)
        except Exception:  # the exporter's own errors must not kill the processor's thread
            log.warning("trace export failed", exc_info=True)
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self._dropped.inc(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _CountingProcessor(BatchSpanProcessor):
    """A ``BatchSpanProcessor`` that counts the spans its full queue drops (the SDK only logs that).

    The queue is the SDK's bounded deque (``OTEL_BSP_MAX_QUEUE_SIZE``): appending to a full one
    discards the oldest span, so a span ending while the queue is full is one span dropped.
    """

    def __init__(self, exporter: SpanExporter, dropped: DropCounter) -> None:
        super().__init__(exporter)
        self._dropped = dropped
        inner = getattr(self, "_batch_processor", None)
        self._queue = getattr(inner, "_queue", None)  # the SDK's deque; None: an SDK that hides it

    def on_end(self, span: ReadableSpan) -> None:
        queue = self._queue
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
            self._dropped.inc()
        super().on_end(span)


class Tracer:
    """The process's tracer: starts server spans, batch item spans and the attempts below them."""

    def __init__(
        self,
        *,
        endpoint: str,
        ratio: float,
        service_name: str,
        headers: str | None,
        dropped: DropCounter,
    ) -> None:
        exporter = OTLPSpanExporter(
            endpoint=endpoint + "/v1/traces",
            headers=parse_env_headers(headers, liberal=True) if headers else None,
        )
        self._processor = _CountingProcessor(_CountingExporter(exporter, dropped), dropped)
        self.resource = Resource.create({"service.name": service_name})
        self.scope = InstrumentationScope("relay")
        self._bound = TraceIdRatioBased.get_bound_for_rate(ratio)
        self._ids = random.Random()  # seeded from os.urandom; ids need to be unique, not secret
        self._servers: dict[str, tuple[str, int]] = {}  # base URL -> (server.address, server.port)
        # A full queue is counted in relay_otel_spans_dropped_total; the SDK's line per dropped span
        # would flood the log exactly when the collector is already in trouble.
        logging.getLogger("opentelemetry.sdk._shared_internal").setLevel(logging.ERROR)

    def request(
        self,
        name: str,
        attributes: dict[str, Any],
        headers: Mapping[str, str] | None = None,
    ) -> RequestTrace:
        """A SERVER span, the child of the caller's ``traceparent`` when it sent one (parent-based:
        its sampled flag decides); else a new trace, sampled at the configured ratio."""
        parent = None
        tracestate = None
        if headers is not None:
            parent = parse_traceparent(headers.get("traceparent"), headers.get("tracestate"))
        bits = self._ids.getrandbits
        if parent is not None:
            trace_id, sampled, state = parent.trace_id, parent.trace_flags.sampled, parent.trace_state
            if state:
                tracestate = headers.get("tracestate") if headers is not None else None
        else:
            trace_id = bits(128) or 1
            sampled = (trace_id & _TRACE_ID_LIMIT) < self._bound
            state = _EMPTY_STATE
        return RequestTrace(
            self,
            name,
            SpanKind.SERVER,
            trace_id,
            bits(64) or 1,
            parent,
            sampled,
            state,
            attributes,
            (),
            tracestate,
        )

    def item(self, attributes: dict[str, Any], link: str | None) -> RequestTrace | None:
        """A batch item's root span ``batch.item``, linked to its batch's create span (``link``: the
        ``traceparent`` stored with the batch). ``None`` when the create was not sampled or not traced:
        its items are not traced either (SPEC §18)."""
        remote = parse_traceparent(link)
        if remote is None or not remote.trace_flags.sampled:
            return None
        bits = self._ids.getrandbits
        links = (Link(remote),)
        return RequestTrace(
            self,
            "batch.item",
            SpanKind.INTERNAL,
            bits(128) or 1,
            bits(64) or 1,
            None,
            True,
            _EMPTY_STATE,
            attributes,
            links,
            None,
        )

    def asgi(self, app: ASGIApp, *, writes_only: bool = False) -> ASGIApp:
        """``app`` with a SERVER span per HTTP request (``writes_only``: per POST/PUT/PATCH/DELETE, the
        control plane's writes), named ``<method> <path>``, a child of the caller's ``traceparent``."""
        return _TracedApp(self, app, writes_only)

    def server_of(self, base_url: str) -> tuple[str, int]:
        """``server.address`` and ``server.port`` of a host's base URL (parsed once per URL)."""
        found = self._servers.get(base_url)
        if found is None:
            from urllib.parse import urlsplit

            parts = urlsplit(base_url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            found = self._servers[base_url] = (parts.hostname or "", port)
        return found

    def emit(
        self,
        name: str,
        kind: SpanKind,
        context: SpanContext,
        parent: SpanContext | None,
        attributes: dict[str, Any],
        links: Sequence[Link],
        error: bool,
        start_ns: int,
    ) -> None:
        """Hand one ended span to the batching processor (it only queues it)."""
        span = ReadableSpan(
            name,
            context,
            parent,
            self.resource,
            attributes,
            (),
            links,
            kind,
            None,
            _ERROR if error else _UNSET,
            start_ns,
            time.time_ns(),
            self.scope,
        )
        self._processor.on_end(span)

    def shutdown(self) -> None:
        """Export what is queued (bounded by the exporter's timeout) and stop the processor's thread."""
        self._processor.shutdown()


class AttemptSpan:
    """One upstream attempt's span until it ends."""

    __slots__ = ("attributes", "name", "span_id", "start_ns")

    def __init__(self, name: str, span_id: int, attributes: dict[str, Any]) -> None:
        self.name = name
        self.span_id = span_id
        self.attributes = attributes
        self.start_ns = time.time_ns()


class RequestTrace:
    """The server (or batch item) span of one request, and the attempts made under it."""

    __slots__ = (
        "_attributes",
        "_context",
        "_kind",
        "_links",
        "_name",
        "_parent",
        "_start_ns",
        "_state",
        "_tracer",
        "sampled",
        "span_id",
        "trace_id",
        "tracestate",
    )

    def __init__(
        self,
        tracer: Tracer,
        name: str,
        kind: SpanKind,
        trace_id: int,
        span_id: int,
        parent: SpanContext | None,
        sampled: bool,
        state: TraceState,
        attributes: dict[str, Any],
        links: Sequence[Link],
        tracestate: str | None,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self.trace_id = trace_id
        self.span_id = span_id
        self._parent = parent
        self.sampled = sampled  # whether this trace is exported (decided once, at its start)
        self._state = state
        self._attributes = attributes
        self._links = links
        self.tracestate = tracestate  # the caller's header, passed on to every upstream call
        self._context: SpanContext | None = None
        self._start_ns = time.time_ns()

    def _span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            flags = _SAMPLED if self.sampled else _NOT_SAMPLED
            context = self._context = SpanContext(self.trace_id, self.span_id, False, flags, self._state)
        return context

    def ids(self) -> tuple[str, str]:
        """``trace_id`` and ``span_id`` as lowercase hex, for the request's log line."""
        return f"{self.trace_id:032x}", f"{self.span_id:016x}"

    def traceparent(self) -> str:
        return _traceparent(self.trace_id, self.span_id, self.sampled)

    def attempt(self, name: str, attributes: dict[str, Any]) -> tuple[AttemptSpan, str]:
        """A CLIENT child span for one upstream attempt, and the ``traceparent`` naming it."""
        span_id = self._tracer._ids.getrandbits(64) or 1
        return AttemptSpan(name, span_id, attributes), _traceparent(self.trace_id, span_id, self.sampled)

    def server_of(self, base_url: str) -> tuple[str, int]:
        return self._tracer.server_of(base_url)

    def end_attempt(self, span: AttemptSpan, attributes: dict[str, Any], error_type: str | None) -> None:
        """End an attempt span; ``error_type`` (a status or an error kind) marks it failed."""
        if not self.sampled:
            return
        merged = span.attributes
        merged.update(attributes)
        if error_type is not None:
            merged["error.type"] = error_type
        flags = _SAMPLED
        context = SpanContext(self.trace_id, span.span_id, False, flags, self._state)
        self._tracer.emit(
            span.name,
            SpanKind.CLIENT,
            context,
            self._span_context(),
            merged,
            (),
            error_type is not None,
            span.start_ns,
        )

    def annotate(self, attributes: dict[str, Any]) -> None:
        if self.sampled:
            self._attributes.update(attributes)

    def finish(self, attributes: dict[str, Any], error: bool) -> None:
        """End the span with its final attributes; ``error``: the caller got a 5xx (an item: discarded)."""
        if not self.sampled:
            return
        merged = self._attributes
        merged.update(attributes)
        self._tracer.emit(
            self._name,
            self._kind,
            self._span_context(),
            self._parent,
            merged,
            self._links,
            error,
            self._start_ns,
        )


class _TracedApp:
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
