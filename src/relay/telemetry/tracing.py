"""The tracing facade (SPEC §18): whether traces are on, and the one door to the OpenTelemetry SDK.

Tracing is off unless ``RELAY_OTEL_ENDPOINT`` is set, and off must cost nothing: this module imports no
OpenTelemetry code, :func:`start_tracing` returns ``None`` when tracing is off, and every caller holds
that ``None`` and asks ``if tracer is not None`` once per request — no span objects, no context
variables, no SDK import (``relay.telemetry.tracing_export`` is imported only when tracing is on).

What it deliberately does not know: which spans exist and what they carry (the live handler, the
pipeline, the batch runner and the HTTP façades decide; ``tracing_export`` builds them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from relay.config import ConfigError, Settings
from relay.telemetry.trace_context import TRACED_REQUEST, DropCounter

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import Tracer


def batch_created(batch_id: str, items: int) -> str | None:
    """A batch is being created (SPEC §18): put ``relay.batch_id`` and ``relay.batch_items`` on the
    request's server span and answer the ``traceparent`` to store with the batch — ``None`` when that
    request is not traced or not sampled (its items are then not traced either)."""
    trace = TRACED_REQUEST.get()
    if trace is None or not trace.sampled:
        return None
    trace.annotate({"relay.batch_id": batch_id, "relay.batch_items": items})
    return trace.traceparent()


def start_tracing(settings: Settings, dropped: DropCounter) -> Tracer | None:
    """The process's tracer, or ``None`` when ``RELAY_OTEL_ENDPOINT`` is unset (then nothing of the
    SDK is imported). The exporter's thread starts here; :meth:`Tracer.shutdown` flushes and stops it."""
    if settings.otel_endpoint is None:
        return None
    from relay.telemetry.tracing_export import Tracer

    headers = settings.otel_headers.get_secret_value() if settings.otel_headers is not None else None
    try:
        return Tracer(
            endpoint=settings.otel_endpoint,
            ratio=settings.otel_ratio,
            service_name=settings.otel_service_name,
            headers=headers,
            dropped=dropped,
        )
    except ValueError as exc:  # the SDK's own checks of OTEL_BSP_* (e.g. a batch larger than the queue)
        raise ConfigError(f"{_bsp_variable(str(exc))}: {exc}") from None


def _bsp_variable(message: str) -> str:
    """The ``OTEL_BSP_*`` variable a batch span processor's complaint is about."""
    for prefix, variable in (
        ("max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
        ("max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE"),
        ("schedule_delay", "OTEL_BSP_SCHEDULE_DELAY"),
    ):
        if message.startswith(prefix):
            return variable
    return "OTEL_BSP_*"
