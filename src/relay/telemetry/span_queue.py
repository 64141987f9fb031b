"""The OpenTelemetry SDK's batching processor and OTLP/HTTP exporter, counting what they drop
(``relay_otel_spans_dropped_total``): a collector that is down costs spans, never a request's latency,
and an operator sees how many were lost (SPEC §18)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from relay.telemetry.otlp_encode import SpanEncoder
from relay.telemetry.trace_context import DropCounter

log = logging.getLogger("relay.telemetry")


class CountingExporter(SpanExporter):
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


class CountingProcessor(BatchSpanProcessor):
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
