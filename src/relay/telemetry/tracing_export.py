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
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceState
from opentelemetry.util.re import parse_env_headers

from relay.telemetry.span_queue import CountingExporter, CountingProcessor
from relay.telemetry.trace_context import DropCounter
from relay.telemetry.traced_asgi import ASGIApp, TracedApp
from relay.telemetry.traceparent import (
    EMPTY_STATE,
    NOT_SAMPLED,
    SAMPLED,
    format_traceparent,
    parse_traceparent,
)

_ERROR = Status(StatusCode.ERROR)
_UNSET = Status(StatusCode.UNSET)
_TRACE_ID_LIMIT = TraceIdRatioBased.TRACE_ID_LIMIT


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
        self._processor = CountingProcessor(CountingExporter(exporter, dropped), dropped)
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
            state = EMPTY_STATE
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
            EMPTY_STATE,
            attributes,
            links,
            None,
        )

    def asgi(self, app: ASGIApp, *, writes_only: bool = False) -> ASGIApp:
        """``app`` with a SERVER span per HTTP request (``writes_only``: per POST/PUT/PATCH/DELETE, the
        control plane's writes), named ``<method> <path>``, a child of the caller's ``traceparent``."""
        return TracedApp(self, app, writes_only)

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
            flags = SAMPLED if self.sampled else NOT_SAMPLED
            context = self._context = SpanContext(self.trace_id, self.span_id, False, flags, self._state)
        return context

    def ids(self) -> tuple[str, str]:
        """``trace_id`` and ``span_id`` as lowercase hex, for the request's log line."""
        return f"{self.trace_id:032x}", f"{self.span_id:016x}"

    def traceparent(self) -> str:
        return format_traceparent(self.trace_id, self.span_id, self.sampled)

    def attempt(self, name: str, attributes: dict[str, Any]) -> tuple[AttemptSpan, str]:
        """A CLIENT child span for one upstream attempt, and the ``traceparent`` naming it."""
        span_id = self._tracer._ids.getrandbits(64) or 1
        traceparent = format_traceparent(self.trace_id, span_id, self.sampled)
        return AttemptSpan(name, span_id, attributes), traceparent

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
        flags = SAMPLED
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
