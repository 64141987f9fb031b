"""A whole response as a stream and a stream as a whole response, in one shape (SPEC §19).

The response cache keeps one form of an answer — the whole response in the caller's shape — and must
serve it to a caller that streams, and keep what a streamed answer delivered. :func:`stream_of` renders
a whole response as that shape's SSE events through the same encoders translation uses
(``relay.adapters.<shape>_sse``), and :class:`StreamAssembler` folds the SSE bytes a caller received
back into the whole response, through the same decoders. Relay's canonical shape (§7.2) has its own
two-event stream (``delta``/``done``), handled here directly.

What it deliberately does not know: caches, stores, keys, HTTP.

Invariants: pure functions and one stateful assembler per stream; malformed input never raises on the
response path — :meth:`StreamAssembler.finish` answers None for a stream it cannot fold (an error
event, no terminal event, a shape it does not know), and :func:`stream_of` raises ``ValueError`` only
for a body that is not a JSON object (the cache treats that entry as a miss).
"""

from __future__ import annotations

from typing import Any

from . import ir
from .base import ANTHROPIC, CANONICAL, OPENAI, OPENAI_RESPONSES, Usage
from .json_codec import dumps, loads
from .sse import EventSplitter, event_data, named_event
from .translate import DECODERS, ENCODERS, READ_RESPONSE, WRITE_RESPONSE, Decoder

#: The shapes whose answers can be replayed as a stream (embeddings never stream).
STREAM_SHAPES = frozenset((OPENAI, ANTHROPIC, OPENAI_RESPONSES, CANONICAL))


def stream_of(shape: str, body: bytes, *, model: str, include_usage: bool = False) -> bytes:
    """The SSE stream of ``shape`` that carries the whole response ``body`` (same shape)."""
    parsed = loads(body)
    if not isinstance(parsed, dict):
        raise ValueError("a cached response is not a JSON object")
    if shape == CANONICAL:
        given = parsed.get("usage")
        usage: dict[str, Any] = given if isinstance(given, dict) else {}
        out = []
        if isinstance(parsed.get("content"), str) and parsed["content"]:
            out.append(named_event(b"delta", {"text": parsed["content"]}))
        done = {
            "stop_reason": parsed.get("stop_reason"),
            "usage": {
                "input_tokens": usage.get("input_tokens", 0),
                "output_tokens": usage.get("output_tokens", 0),
            },
        }
        out.append(named_event(b"done", done))
        return b"".join(out)
    response = READ_RESPONSE[shape](parsed)
    encoder = ENCODERS[shape](model, include_usage)
    return b"".join(encoder.take(event) for event in ir.response_events(response))


class StreamAssembler:
    """Feed it the SSE bytes sent to the caller, in order; :meth:`finish` gives the whole response."""

    __slots__ = ("_canonical", "_collector", "_decoder", "_failed", "_model", "_shape", "_splitter")

    def __init__(self, shape: str, model: str) -> None:
        self._shape = shape
        self._model = model
        self._splitter = EventSplitter()
        self._decoder: Decoder | None = DECODERS[shape]() if shape in DECODERS else None
        self._collector = ir.Collector(model)
        self._canonical: dict[str, Any] = {"text": [], "done": None}
        self._failed = shape not in STREAM_SHAPES

    def feed(self, chunk: bytes) -> None:
        if self._failed:
            return
        buf, spans = self._splitter.split(chunk)
        for start, end, _after in spans:
            self._event(buf, start, end)

    def _event(self, buf: bytes, start: int, end: int) -> None:
        data = event_data(buf, start, end)
        if data is None:
            return
        if self._decoder is None:
            self._canonical_event(buf[start:end], data)
            return
        if data == b"[DONE]":
            events = self._decoder.done()
        else:
            try:
                parsed = loads(data)
            except ValueError:
                self._failed = True
                return
            events = self._decoder.take(parsed) if isinstance(parsed, dict) else []
        for event in events:
            self._collector.take(event)

    def _canonical_event(self, block: bytes, data: bytes) -> None:
        try:
            parsed = loads(data)
        except ValueError:
            self._failed = True
            return
        if block.startswith(b"event: delta") and isinstance(parsed, dict):
            self._canonical["text"].append(str(parsed.get("text") or ""))
        elif block.startswith(b"event: done") and isinstance(parsed, dict):
            self._canonical["done"] = parsed
        else:  # an error event: the answer is not whole
            self._failed = True

    def finish(self, usage: Usage) -> bytes | None:
        """The whole response the stream carried, with ``usage`` (what the upstream reported, which a
        caller's stream may leave out), or None when the stream did not end whole."""
        if self._failed:
            return None
        if self._decoder is None:
            done = self._canonical["done"]
            if done is None or done.get("stop_reason") == "error":
                return None
            return dumps(
                {
                    "id": None,
                    "model": self._model,
                    "content": "".join(self._canonical["text"]),
                    "stop_reason": done.get("stop_reason"),
                    "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
                }
            )
        collector = self._collector
        if collector.error is not None or not collector.ended:
            return None
        response = collector.response
        response.usage = ir.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_tokens=usage.cached_input_tokens,
        )
        return dumps(WRITE_RESPONSE[self._shape](response, self._model))
