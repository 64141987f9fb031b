"""``StreamTap``: meters a same-shape SSE stream on its way to the caller, passing bytes through untouched.

What it knows: where each shape's stream reports usage (``relay.adapters.openai``, ``.responses``,
``.anthropic``), and that only events holding a ``"usage": {…}`` object need parsing. Providers flush
whole events, so a chunk that ends with a blank line while nothing is held back takes a fast path: one
or two C-level scans (counting ``"usage"`` keys against ``"usage": null`` ones) and, in strip mode, a
``bytes.replace``. Only chunks that cut an event or hold a usage object are framed event by event.

What it deliberately does not know: sockets, timing (time-to-first-token is the proxy's), what the
caller does with the bytes, and cross-shape streams (``relay.adapters.canonical_stream``).

Invariants:
- Without ``strip_usage_chunk`` (``responses``, ``anthropic``, and chat streams whose caller asked for
  usage itself), ``feed`` returns the very chunk it was given (zero copy) and ``finish`` returns ``b""``.
- With it (chat streams where Relay injected ``include_usage``), output is aligned to whole events:
  ``feed`` returns the complete events received so far, each with ``"usage": null`` removed and the
  usage-only chunk dropped; the bytes of an event not yet ended are held back until it ends or
  ``finish`` is called. Concatenated, the outputs equal the stream the upstream would have sent without
  ``include_usage``, whatever the chunk boundaries.
- Usage read from events split across chunks is the same as from whole events; a malformed event
  never raises (it is forwarded and simply not metered).
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from .anthropic import AnthropicStreamUsage
from .base import ANTHROPIC, OPENAI, OPENAI_RESPONSES, Usage
from .json_codec import has_object_key, loads
from .openai import ChatStreamUsage, drop_null_usage, finish_reasons_in, strip_chunk
from .responses import ResponsesStreamUsage
from .sse import EventSplitter, Span, event_data

_USAGE_KEY: Final = b'"usage"'


class StreamUsage(Protocol):
    """Collects the usage a shape's stream events report."""

    @property
    def usage(self) -> Usage: ...

    model: str | None  # the model the answer names, when an event read for its usage says it
    finish_reasons: list[str]

    def take(self, event: dict[str, Any]) -> None: ...


def stream_usage(shape: str) -> StreamUsage:
    """A fresh usage collector for a stream of ``shape`` (``openai``, ``openai_responses``, ``anthropic``)."""
    if shape == OPENAI:
        return ChatStreamUsage()
    if shape == OPENAI_RESPONSES:
        return ResponsesStreamUsage()
    if shape == ANTHROPIC:
        return AnthropicStreamUsage()
    raise ValueError(f"shape {shape!r} does not stream")


def parse_event(buf: bytes, start: int, end: int) -> dict[str, Any] | None:
    """The JSON object in the data of event ``buf[start:end]``; None for ``[DONE]``, comments, bad JSON."""
    data = event_data(buf, start, end)
    if data is None or data[:1] != b"{":
        return None
    try:
        parsed = loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class StreamTap:
    """Feed it every upstream chunk in order; send what ``feed`` returns; call ``finish`` at the end."""

    __slots__ = ("_chat", "_collector", "_reasons", "_splitter")

    def __init__(self, shape: str, *, strip_usage_chunk: bool = False, traced: bool = False) -> None:
        if strip_usage_chunk and shape != OPENAI:
            raise ValueError("only OpenAI chat streams have a usage chunk to strip")
        self._collector = stream_usage(shape)
        self._splitter = EventSplitter()
        # Set only in strip mode: the chat collector ``strip_chunk`` records into.
        self._chat = ChatStreamUsage() if strip_usage_chunk else None
        if self._chat is not None:
            self._collector = self._chat
        # A traced chat stream scans whole events for finish reasons (the other shapes report them in
        # the event that carries usage, which is parsed anyway); untraced streams pay nothing.
        scan = traced and shape == OPENAI
        self._reasons: list[str] | None = self._collector.finish_reasons if scan else None

    @property
    def usage(self) -> Usage:
        """Usage reported so far (final once the stream has ended and ``finish`` was called)."""
        return self._collector.usage

    def answer_attributes(self, attributes: dict[str, Any]) -> None:
        """Add ``gen_ai.response.model`` and ``gen_ai.response.finish_reasons`` to a trace's attempt
        attributes, as far as the events read for their usage named them."""
        collector = self._collector
        if collector.model is not None:
            attributes["gen_ai.response.model"] = collector.model[:256]
        if collector.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = collector.finish_reasons

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to send to the caller now."""
        if not chunk:
            return b""
        if not self._splitter.held and (chunk.endswith(b"\n\n") or chunk.endswith(b"\r\n\r\n")):
            # Fast path: the chunk is whole events (what providers flush), so no framing state is
            # needed unless it holds a usage object. A few C-level scans, no Python loop.
            keys = chunk.count(_USAGE_KEY)
            if not keys:
                out: bytes | None = chunk
            elif self._chat is not None:
                out = drop_null_usage(chunk)
            elif keys == chunk.count(b'"usage":null') or keys == chunk.count(b'"usage": null'):
                out = chunk  # only the nulls of a chat or Responses stream: nothing to read
            else:
                out = None
            if out is not None:
                if self._reasons is not None:
                    finish_reasons_in(out, self._reasons)
                return out
        buf, spans = self._splitter.split(chunk)
        if self._reasons is not None and spans:
            finish_reasons_in(buf[spans[0][0] : spans[-1][1]], self._reasons)
        if self._chat is not None:
            return self._rewrite(self._chat, buf, spans, chunk)
        for start, end, _after in spans:
            if has_object_key(buf, _USAGE_KEY, start, end):
                self._take(buf, start, end)
        return chunk

    def finish(self) -> bytes:
        """After the upstream stream ended (or broke): meters and returns whatever was held back."""
        rest = self._splitter.take_rest()
        if not rest:
            return b""
        if self._reasons is not None:
            finish_reasons_in(rest, self._reasons)
        if self._chat is not None:
            return self._rewrite(self._chat, rest, [(0, len(rest), len(rest))], b"")
        if has_object_key(rest, _USAGE_KEY):
            self._take(rest, 0, len(rest))
        return b""

    def _take(self, buf: bytes, start: int, end: int) -> None:
        event = parse_event(buf, start, end)
        if event is not None:
            self._collector.take(event)

    @staticmethod
    def _rewrite(chat: ChatStreamUsage, buf: bytes, spans: list[Span], chunk: bytes) -> bytes:
        if not spans:
            return b""
        parts: list[bytes] = []
        copied = 0  # buf[:copied] is already accounted for in parts
        for start, end, after in spans:
            if buf.find(_USAGE_KEY, start, end) == -1:
                continue
            block = buf[start:end]
            kept = strip_chunk(block, chat)
            if kept is block:
                continue
            parts.append(buf[copied:start])
            if kept is not None:
                parts.append(kept)
                parts.append(buf[end:after])
            copied = after
        last = spans[-1][2]
        if not parts:
            return chunk if buf is chunk and last == len(chunk) else buf[:last]
        parts.append(buf[copied:last])
        return b"".join(parts)
