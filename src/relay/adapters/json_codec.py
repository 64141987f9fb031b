"""JSON in and out for the adapters: orjson on the hot path, the standard library for what orjson refuses.

What it knows: orjson rejects some valid JSON (strings with lone UTF-16 surrogate escapes) and cannot
write integers beyond 64 bits; the standard library handles both, so ``loads``/``dumps`` fall back to it
instead of answering a caller's valid body with 400. The fallback costs nothing when orjson succeeds.
(orjson reads integers beyond 64 bits as floats; no provider field accepts such integers, so this
rounding is accepted rather than paid for on every body.)
It also knows how to find a top-level ``"usage"`` object near the end of a large response without
parsing the whole body (``usage_object``).

What it deliberately does not know: which shape a body has, or what any field means.

Invariants: ``loads`` accepts exactly RFC 8259 JSON (``NaN``/``Infinity`` are refused, as orjson does);
``dumps`` always returns compact UTF-8 (or pure ASCII from the fallback) bytes.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import orjson

LARGE_BODY: int = 64 * 1024
"""Below this size a response is simply parsed whole; above it ``usage_object`` tries a slice first."""


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; raises ``ValueError`` (orjson.JSONDecodeError is one) on anything that is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        if isinstance(data, memoryview):
            data = bytes(data)
        try:
            return json.loads(data, parse_constant=_refuse_constant)
        except (ValueError, TypeError, RecursionError) as exc:
            raise ValueError(str(exc)) from None


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _skip_space(buf: bytes, i: int, end: int) -> int:
    while i < end and buf[i] in b" \t\r\n":
        i += 1
    return i


def object_start_after_key(buf: bytes, key_at: int, key_len: int, end: int) -> int:
    """Where the ``{`` of ``"key": {`` starts, given the key's position; -1 when the value is no object."""
    i = _skip_space(buf, key_at + key_len, end)
    if i >= end or buf[i] != 0x3A:  # ':'
        return -1
    i = _skip_space(buf, i + 1, end)
    return i if i < end and buf[i] == 0x7B else -1  # '{'


def has_object_key(buf: bytes, key: bytes, start: int = 0, end: int | None = None) -> bool:
    """True when ``buf[start:end]`` holds ``<key>: {`` (key given with its quotes, e.g. ``b'"usage"'``)."""
    stop = len(buf) if end is None else end
    at = buf.find(key, start, stop)
    while at != -1:
        if object_start_after_key(buf, at, len(key), stop) != -1:
            return True
        at = buf.find(key, at + len(key), stop)
    return False


def _object_end(buf: bytes, start: int) -> int:
    """One past the ``}`` closing the object opened at ``start``; -1 if it is not closed.

    Counts braces without tracking strings, which is right for usage objects (numbers and nested
    objects only); callers validate what they parse and fall back to a full parse otherwise.
    """
    depth, i = 1, start + 1
    while True:
        close = buf.find(b"}", i)
        if close == -1:
            return -1
        depth += buf.count(b"{", i, close) - 1
        i = close + 1
        if depth == 0:
            return i


def usage_object(body: bytes, required_key: str) -> dict[str, Any] | None:
    """The top-level ``usage`` object of a large response, parsed from a slice of the body.

    Providers put ``usage`` at (or near) the end of a response, so it is searched from the end. The
    result is trusted only if it parses and carries ``required_key`` (e.g. ``prompt_tokens``); else
    ``None`` and the caller parses the whole body.
    """
    at = body.rfind(b'"usage"')
    while at != -1:
        start = object_start_after_key(body, at, 7, len(body))
        if start != -1:
            end = _object_end(body, start)
            if end == -1:
                return None
            try:
                found = orjson.loads(body[start:end])
            except orjson.JSONDecodeError:
                return None
            return found if isinstance(found, dict) and required_key in found else None
        at = body.rfind(b'"usage"', 0, at)
    return None
