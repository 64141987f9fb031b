"""OpenAI Chat Completions and Embeddings: usage fields, and the stream-usage request Relay adds and hides.

What it knows:
- usage: chat ``{prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}`` (prompt tokens
  already include the cached ones); embeddings ``{prompt_tokens}`` (no output tokens).
- A chat stream reports usage only if the request sets ``stream_options.include_usage``; then every chunk
  carries ``"usage": null`` and one extra chunk with ``"choices": []`` carries the usage before
  ``[DONE]``. Relay needs usage for every stream, so ``request_stream_usage`` turns it on and
  ``strip_chunk`` undoes its visible effects: the null field is removed from each chunk and the
  usage-only chunk is dropped, so the caller receives exactly the stream it asked for.

What it deliberately does not know: transport, framing (``relay.adapters.sse``), other shapes.

Invariants: nothing here raises on a malformed upstream body — missing or odd usage reads as zeros, an
unparseable chunk passes through unchanged.
"""

from __future__ import annotations

import re
from typing import Any, Final

from .base import Usage, count, detail
from .json_codec import dumps, has_object_key, loads
from .sse import event_data

# How ``"usage": null`` appears in compact (OpenAI, orjson) and spaced (Python json.dumps) chunks, with
# the separating comma it takes along. Inside a JSON string every quote is escaped, so these byte
# sequences can only be the key itself.
_NULL_USAGE: Final = (b',"usage":null', b'"usage":null,', b', "usage": null', b'"usage": null, ')


def chat_usage(usage: Any) -> Usage:
    """``Usage`` from a chat ``usage`` object."""
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("prompt_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    reasoning = detail(usage.get("completion_tokens_details"), "reasoning_tokens")
    return Usage(count(usage.get("prompt_tokens")), count(usage.get("completion_tokens")), cached, reasoning)


def embeddings_usage(usage: Any) -> Usage:
    """``Usage`` from an embeddings ``usage`` object: input only."""
    if not isinstance(usage, dict):
        return Usage()
    return Usage(input_tokens=count(usage.get("prompt_tokens")))


def request_stream_usage(body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The body with ``stream_options.include_usage`` on, and whether Relay turned it on.

    A caller's own ``include_usage: true`` is left alone (nothing to hide). A ``stream_options`` that is
    not an object is left for the upstream to reject, exactly as it would without Relay.
    """
    options = body.get("stream_options")
    if options is None:
        return {**body, "stream_options": {"include_usage": True}}, True
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return body, False
    return {**body, "stream_options": {**options, "include_usage": True}}, True


# A finish reason as chat chunks spell it (compact or spaced). Reasons are short identifiers, so an
# escaped quote never appears in one; inside a JSON string the key's own quotes would be escaped.
_FINISH_REASON: Final = re.compile(rb'"finish_reason"\s*:\s*"([^"\\]{1,64})"')


def finish_reasons_in(events: bytes, reasons: list[str]) -> None:
    """Append the finish reasons named in ``events`` (whole chat events) to ``reasons``, in order.

    A byte scan, not a parse: it runs only for traced streams, whose chunks the usage path never
    parses unless they carry usage, and the reasons sit in earlier chunks than the usage.
    """
    if b'"finish_reason"' in events:
        reasons.extend(match.decode("ascii", "replace") for match in _FINISH_REASON.findall(events))


class ChatStreamUsage:
    """Collects usage from chat chunks: the last ``usage`` object seen wins; ``model`` is the model
    that chunk names (for a trace's attempt span). Finish reasons sit in earlier chunks; a traced
    stream's tap scans them (``finish_reasons_in``), an untraced one never looks."""

    __slots__ = ("finish_reasons", "model", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        self.model: str | None = None
        self.finish_reasons: list[str] = []

    def take(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = chat_usage(usage)
            model = chunk.get("model")
            if type(model) is str:
                self.model = model


def drop_null_usage(data: bytes) -> bytes | None:
    """``data`` (one or more chat events) without its ``"usage": null`` fields; ``None`` if some
    ``"usage"`` remains after that (a usage object, or an unusual spelling): use ``strip_chunk``."""
    for pattern in _NULL_USAGE:
        data = data.replace(pattern, b"")  # one scan; the same object back when absent
        if b'"usage"' not in data:
            return data
    return None


def strip_chunk(block: bytes, usage: ChatStreamUsage) -> bytes | None:
    """One chat event (without its blank line) as the caller must see it; ``None`` drops the event.

    Records the usage it removes. Events without ``"usage"`` are returned as they are (same object).
    """
    if b'"usage"' not in block:
        return block
    if has_object_key(block, b'"usage"'):
        return _without_usage_object(block, usage)
    stripped = drop_null_usage(block)
    return stripped if stripped is not None else _reserialized_without_usage(block)


def _chunk_of(block: bytes) -> tuple[bytes, dict[str, Any]] | None:
    data = event_data(block, 0, len(block))
    if data is None:
        return None
    try:
        chunk = loads(data)
    except ValueError:
        return None
    return (data, chunk) if isinstance(chunk, dict) else None


def _without_usage_object(block: bytes, usage: ChatStreamUsage) -> bytes | None:
    parsed = _chunk_of(block)
    if parsed is None:
        return block
    data, chunk = parsed
    usage.take(chunk)
    if not chunk.get("choices"):
        return None  # the usage-only chunk Relay asked for
    # Some OpenAI-compatible servers put usage on the last content chunk instead: keep the chunk.
    del chunk["usage"]
    return block.replace(data, dumps(chunk), 1)


def _reserialized_without_usage(block: bytes) -> bytes:
    """Slow path for ``"usage"`` spelled in a way ``_NULL_USAGE`` does not cover."""
    parsed = _chunk_of(block)
    if parsed is None:
        return block
    data, chunk = parsed
    if "usage" not in chunk or chunk["usage"] is not None:
        return block
    del chunk["usage"]
    return block.replace(data, dumps(chunk), 1)
