"""Spans to an OTLP ``ExportTraceServiceRequest``, written straight to protobuf's wire format.

Why: the SDK's encoder builds a protobuf object per span, attribute and value, about 40 µs of CPU per
span — more than everything else a traced request costs. Relay's spans are simple (string, integer,
boolean, float and string-list attributes, links without attributes, no events), so they are written
as bytes directly, a few µs each. The resource and the instrumentation scope are encoded once by the
SDK's own encoder and reused. Anything this encoder does not expect (an event, a mapping value) makes
:func:`encode_spans` return ``None`` and the caller uses the SDK's encoder for that batch.

Invariant: the bytes decode (with ``opentelemetry-proto``) to the same message the SDK's encoder
builds for the same spans (``tests/unit/telemetry/test_otlp_encode.py`` compares them).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

_FIXED64 = struct.Struct("<Q").pack
_DOUBLE = struct.Struct("<d").pack
_FIXED32 = struct.Struct("<I").pack
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field (``tag`` is ``field << 3 | 2``)."""
    return bytes((tag,)) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes | None:
    kind = type(value)
    if kind is str:
        return _field(0x0A, value.encode("utf-8"))  # string_value = 1
    if kind is bool:
        return b"\x10" + (b"\x01" if value else b"\x00")  # bool_value = 2
    if kind is int:
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int_value = 3 (int64)
    if kind is float:
        return b"\x21" + _DOUBLE(value)  # double_value = 4
    if kind in (list, tuple):
        parts = []
        for item in value:
            encoded = _any_value(item)
            if encoded is None:
                return None
            parts.append(_field(0x0A, encoded))  # ArrayValue.values = 1
        return _field(0x2A, b"".join(parts))  # array_value = 5
    if kind is bytes:
        return _field(0x3A, value)  # bytes_value = 7
    return None


def _key_value(key: str, value: Any) -> bytes | None:
    """One ``attributes`` entry of a span (field 9: a ``KeyValue``)."""
    encoded = _any_value(value)
    if encoded is None:
        return None
    return _field(0x4A, _field(0x0A, key.encode("utf-8")) + _field(0x12, encoded))


_SCALARS = (str, int, bool, float)
MAX_CACHED_ATTRIBUTES = 8192


def _attributes(
    attributes: Mapping[str, Any] | None, cache: dict[tuple[str, type, Any], bytes]
) -> bytes | None:
    """A span's attributes. Most pairs recur from span to span (the method, the path, the model, the
    host, the key, the status, small token counts), so each scalar pair is encoded once and kept in
    ``cache`` (bounded: cleared when it grows past ``MAX_CACHED_ATTRIBUTES``)."""
    if not attributes:
        return b""
    parts = []
    for key, value in attributes.items():
        kind = type(value)
        if kind in _SCALARS:
            found = cache.get((key, kind, value))
            if found is None:
                found = _key_value(key, value)
                if found is None:
                    return None
                if len(cache) >= MAX_CACHED_ATTRIBUTES:
                    cache.clear()
                cache[(key, kind, value)] = found
        else:
            found = _key_value(key, value)
            if found is None:
                return None
        parts.append(found)
    return b"".join(parts)


def _span(span: ReadableSpan, cache: dict[tuple[str, type, Any], bytes]) -> bytes | None:
    if span.events:
        return None
    context = span.context
    parent = span.parent
    assert context is not None
    out = [
        b"\x0a\x10" + context.trace_id.to_bytes(16, "big"),  # trace_id = 1
        b"\x12\x08" + context.span_id.to_bytes(8, "big"),  # span_id = 2
    ]
    state = context.trace_state
    if state:
        out.append(_field(0x1A, ",".join(f"{k}={v}" for k, v in state.items()).encode()))  # trace_state = 3
    if parent is not None:
        out.append(b"\x22\x08" + parent.span_id.to_bytes(8, "big"))  # parent_span_id = 4
    # name = 5 and kind = 6 (OTLP counts kinds from UNSPECIFIED), one cached encoding per pair
    name, kind = span.name, span.kind
    head = cache.get((name, SpanKind, kind))
    if head is None:
        head = _field(0x2A, name.encode("utf-8")) + b"\x30" + bytes((kind.value + 1,))
        cache[(name, SpanKind, kind)] = head
    out.append(head)
    out.append(b"\x39" + _FIXED64(span.start_time or 0) + b"\x41" + _FIXED64(span.end_time or 0))  # 7, 8
    attributes = _attributes(span.attributes, cache)  # attributes = 9
    if attributes is None:
        return None
    out.append(attributes)
    for link in span.links:  # links = 13
        if link.attributes:
            return None
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if link.context.is_remote else 0)
        body = (
            b"\x0a\x10"
            + link.context.trace_id.to_bytes(16, "big")
            + b"\x12\x08"
            + link.context.span_id.to_bytes(8, "big")
            + b"\x35"
            + _FIXED32(flags)  # flags = 6
        )
        out.append(_field(0x6A, body))
    status = span.status
    code = status.status_code.value
    body = (_field(0x12, status.description.encode()) if status.description else b"") + (
        b"\x18" + bytes((code,)) if code else b""
    )
    out.append(_field(0x7A, body))  # status = 15 (always present, as the SDK's encoder writes it)
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if parent is not None and parent.is_remote else 0)
    out.append(b"\x85\x01" + _FIXED32(flags))  # flags = 16
    return b"".join(out)


class SpanEncoder:
    """Encodes batches of spans; remembers each resource's and scope's encoding (they never change)."""

    def __init__(self) -> None:
        self._headers: dict[int, tuple[Any, bytes]] = {}
        self._attributes: dict[tuple[str, type, Any], bytes] = {}

    def _once(self, key: Any, encode: Callable[[Any], Any]) -> bytes:
        """``encode(key).SerializeToString()``, computed once per resource or scope."""
        found = self._headers.get(id(key))
        if found is None or found[0] is not key:
            found = self._headers[id(key)] = (key, encode(key).SerializeToString())
        return found[1]

    def encode(self, spans: Sequence[ReadableSpan]) -> bytes | None:
        """The request's bytes, or ``None`` when a span holds what this encoder does not write."""
        groups: dict[int, tuple[Any, dict[int, tuple[Any, list[bytes]]]]] = {}
        for span in spans:
            encoded = _span(span, self._attributes)
            if encoded is None:
                return None
            resource, scope = span.resource, span.instrumentation_scope
            scopes = groups.setdefault(id(resource), (resource, {}))[1]
            scopes.setdefault(id(scope), (scope, []))[1].append(encoded)
        out = []
        for resource, scopes in groups.values():
            body = [_field(0x0A, self._once(resource, _encode_resource))]
            for scope, encoded_spans in scopes.values():
                scope_body = b""
                if scope is not None:
                    scope_body = _field(0x0A, self._once(scope, _encode_instrumentation_scope))
                scope_body += b"".join(_field(0x12, s) for s in encoded_spans)
                if scope is not None and scope.schema_url:
                    scope_body += _field(0x1A, scope.schema_url.encode())
                body.append(_field(0x12, scope_body))
            if resource.schema_url:
                body.append(_field(0x1A, resource.schema_url.encode()))
            out.append(_field(0x0A, b"".join(body)))
        return b"".join(out)
