"""W3C trace context headers (``traceparent``, ``tracestate``) read and written by the tracer
(SPEC §18): a malformed header starts a new trace rather than failing the request."""

from __future__ import annotations

from opentelemetry.trace import SpanContext, TraceFlags, TraceState

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
EMPTY_STATE = TraceState()
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
    state = EMPTY_STATE
    if tracestate and len(tracestate) <= MAX_TRACESTATE_CHARS:
        state = TraceState.from_header([tracestate])
    flags = SAMPLED if int(flags_hex, 16) & 1 else NOT_SAMPLED
    return SpanContext(trace_id, span_id, True, flags, state)


def format_traceparent(trace_id: int, span_id: int, sampled: bool) -> str:
    return f"00-{trace_id:032x}-{span_id:016x}-{'01' if sampled else '00'}"
