"""What the tracing facade (``relay.telemetry.tracing``) and the SDK side
(``relay.telemetry.tracing_export``) both name, in a module of its own so neither imports the other at
import time."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import RequestTrace

TRACED_REQUEST: ContextVar[RequestTrace | None] = ContextVar("relay_traced_request", default=None)
"""The server span of the batch-API or control-plane request being served (set only by
``Tracer.asgi``, so only when tracing is on, and never on the live path, which passes its span
explicitly). It lets a batch create deep in the engine name its batch on that span without every API's
service signature carrying a span."""


class DropCounter(Protocol):
    """Where dropped spans are counted (``relay_otel_spans_dropped_total``)."""

    def inc(self, amount: float = 1) -> None: ...
