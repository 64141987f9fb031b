"""``relay.telemetry.otlp_encode`` writes the same ExportTraceServiceRequest as the SDK's own encoder
(both decoded with opentelemetry-proto and compared), for every kind of value Relay's spans hold."""

from __future__ import annotations

from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from relay.telemetry.otlp_encode import SpanEncoder

RESOURCE = Resource.create({"service.name": "relay"})
SCOPE = InstrumentationScope("relay")
SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _span(name: str, kind: SpanKind, attributes: dict[str, Any], **extra: Any) -> ReadableSpan:
    context = SpanContext(
        0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, False, SAMPLED, extra.pop("state", None)
    )
    return ReadableSpan(
        name,
        context,
        extra.pop("parent", None),
        RESOURCE,
        attributes,
        extra.pop("events", ()),
        extra.pop("links", ()),
        kind,
        None,
        extra.pop("status", Status(StatusCode.UNSET)),
        1_700_000_000_000_000_000,
        1_700_000_000_123_456_789,
        SCOPE,
    )


def _decoded(data: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    message.ParseFromString(data)
    return message


def test_relay_spans_encode_exactly_as_the_sdk_encodes_them() -> None:
    remote = SpanContext(0x1234, 0x5678, True, SAMPLED, TraceState([("vendor", "x")]))
    local = SpanContext(0x1234, 0x9ABC, False, SAMPLED)
    spans = [
        _span(
            "POST /v1/chat/completions",
            SpanKind.SERVER,
            {"http.request.method": "POST", "http.response.status_code": 200, "relay.request_id": ""},
            parent=remote,
            state=TraceState([("vendor", "x"), ("other", "1")]),
        ),
        _span(
            "chat gpt-x",
            SpanKind.CLIENT,
            {
                "gen_ai.response.finish_reasons": ["stop", "length"],
                "gen_ai.usage.input_tokens": 0,
                "big": 2**62,
                "negative": -3,
                "ratio": 0.25,
                "flag": False,
                "on": True,
                "text": "ünïcödé ✓",
                "raw": b"\x00\x01",
                "error.type": "500",
            },
            parent=local,
            status=Status(StatusCode.ERROR),
        ),
        _span(
            "batch.item", SpanKind.INTERNAL, {"relay.batch_item_idx": 7}, links=(Link(remote), Link(local))
        ),
        _span("ok", SpanKind.SERVER, {}, status=Status(StatusCode.OK)),
    ]
    ours = SpanEncoder().encode(spans)
    assert ours is not None
    assert _decoded(ours) == encode_spans(spans)
    # A second batch reuses the resource and scope encodings: still the same.
    assert _decoded(SpanEncoder().encode(spans[:1]) or b"") == encode_spans(spans[:1])


def test_what_it_does_not_write_falls_back_to_the_sdk() -> None:
    with_event = _span("e", SpanKind.INTERNAL, {}, events=(Event("x", {}, 1),))
    with_mapping = _span("m", SpanKind.INTERNAL, {"map": {"a": 1}})
    assert SpanEncoder().encode([with_event]) is None
    assert SpanEncoder().encode([with_mapping]) is None
