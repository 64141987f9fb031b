"""JSON in and out for the adapters: orjson on the hot path, the standard library for what orjson refuses.

What it knows: orjson rejects some valid JSON (strings with lone UTF-16 surrogate escapes) and cannot
write integers beyond 64 bits; the standard library handles both, so ``loads``/``dumps`` fall back to it.
The fallback costs nothing when orjson succeeds. (orjson reads integers beyond 64 bits as floats; no
provider field accepts such integers, so this rounding is accepted rather than paid for on every body.)

A caller's input is read with ``loads_input``, which adds the two bounds of SPEC §1: no deeper than
``RELAY_MAX_JSON_DEPTH`` (a deep document costs recursion in every later serialiser: orjson refuses to
write past 254 levels, the standard library overflows the stack near 1 000) and no lone surrogate in any
string or key (no UTF-8 encoder — the database driver's, the log's, orjson's — can write one, so it
would fail far from the request, in a background writer). Both answer ``JsonRefused`` (400
``invalid_json``) naming the depth or the field. The depth costs two ``bytes.count`` calls on a body
whose brackets could not nest that deep anyway (every small request), and a walk over its containers
(not its strings) otherwise; the surrogate check runs only when orjson refused the body, since orjson
accepts no lone surrogate.
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


DEFAULT_MAX_DEPTH: int = 128
"""SPEC §1's default for ``RELAY_MAX_JSON_DEPTH``; the setting is capped at 250 so that anything
admitted can still be written by orjson (254 levels)."""


class JsonRefused(ValueError):
    """Input JSON Relay will not take (too deep, a lone surrogate); the message names the depth or field."""


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON; raises ``ValueError`` (orjson.JSONDecodeError is one) on anything that is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            raise JsonRefused("JSON nests deeper than 1024 levels") from None
        if isinstance(data, memoryview):
            data = bytes(data)
        try:
            return json.loads(data, parse_constant=_refuse_constant)
        except RecursionError:
            raise JsonRefused("JSON nests too deep") from None
        except (ValueError, TypeError) as exc:
            raise ValueError(str(exc)) from None


def loads_input(
    data: bytes | bytearray | memoryview | str, max_depth: int = DEFAULT_MAX_DEPTH, *, what: str = "JSON"
) -> Any:
    """A caller's JSON (SPEC §1): ``loads`` plus the depth bound and no lone surrogate anywhere.

    Raises ``JsonRefused`` naming the problem, ``ValueError`` for anything that is not JSON.
    """
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        value = loads(data)  # refuses what is not JSON; what orjson refused but JSON allows comes back
        where = surrogate_path(value)
        if where is not None:
            raise JsonRefused(f"{what} has a lone UTF-16 surrogate in {where}") from None
    raw = data.encode() if isinstance(data, str) else data
    if raw.count(b"[") + raw.count(b"{") > max_depth and depth_exceeds(value, max_depth):
        raise JsonRefused(f"{what} nests deeper than {max_depth} levels (RELAY_MAX_JSON_DEPTH)")
    return value


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when containers nest more than ``limit`` deep (a scalar is depth 0, ``[]`` depth 1).
    Iterative, so no document is too deep to measure."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def surrogate_path(value: Any) -> str | None:
    """Where the first string (or key) holding a lone UTF-16 surrogate is, e.g. ``'messages[0].content'``;
    None when there is none."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if _has_surrogate(node):
                return f"'{_short(path)}'" if path else "the body"
        elif isinstance(node, dict):
            for key, child in reversed(node.items()):
                key_text = str(key)
                if _has_surrogate(key_text):
                    return f"a key of '{_short(path)}'" if path else "a top-level key"
                stack.append((child, f"{path}.{key_text}" if path else key_text))
        elif isinstance(node, list):
            stack.extend((child, f"{path}[{i}]") for i, child in reversed(list(enumerate(node))))
    return None


def _short(path: str) -> str:
    return path if len(path) <= 200 else path[:200] + "…"


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def dumps(obj: Any) -> bytes:
    """Compact JSON bytes; ``ValueError`` for a document nested too deep to write."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        try:
            return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode("ascii")
        except RecursionError:
            raise JsonRefused("JSON nests too deep to write") from None


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
