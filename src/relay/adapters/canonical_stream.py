"""``CanonicalStream``: turns an upstream's SSE stream into Relay's canonical stream (SPEC §7.2).

What it knows: the canonical stream is
    ``event: delta`` / ``data: {"text": "..."}`` — one per non-empty piece of reply text, in order, then
    exactly one ``event: done`` / ``data: {"stop_reason": ..., "usage": {"input_tokens", "output_tokens"}}``;
and where each upstream puts text, stop reason and usage:
    openai            ``choices[0].delta.content``; ``finish_reason``; the usage chunk (``canonical_to``
                      always asks for it); ``data: [DONE]`` ends the stream.
    anthropic         ``content_block_delta`` with a ``text_delta``; ``message_delta.delta.stop_reason``;
                      usage from ``message_start`` + ``message_delta``; ``message_stop`` ends it.
    openai_responses  ``response.output_text.delta``; ``response.completed`` / ``incomplete`` / ``failed``
                      carry status and usage and end it.
An upstream error event mid-stream becomes ``event: error`` / ``data: {"type", "message"}`` (the one
event beyond §7.2; clients that only know ``delta``/``done`` can ignore it) and the ``done`` that
follows has ``stop_reason: "error"``.

What it deliberately does not know: sockets and timing, non-text content (tool calls, thinking, images
are dropped: the canonical shape has no field for them), and the stop-reason vocabulary
(``relay.adapters.canonical``).

Invariants: whatever the upstream sends or how it is cut into chunks — and even if it stops early —
``feed``s followed by ``finish`` produce exactly one ``done`` event, and it is the last one. A stream that
ends before its terminal event gets ``done`` from ``finish`` with the stop reason seen so far, or
``"error"`` if none. ``usage`` is the same value the ``done`` event reports.
"""

from __future__ import annotations

from typing import Any

from .base import ADAPTERS, ANTHROPIC, OPENAI, Usage
from .canonical import chat_stop_reason, responses_stop_reason
from .sse import EventSplitter, event_data, named_event
from .stream import parse_event, stream_usage

_TERMINAL_RESPONSES = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _error_payload(error: Any, fallback: str) -> dict[str, str]:
    if isinstance(error, dict):
        kind, message = error.get("type") or error.get("code"), error.get("message")
        return {"type": str(kind or fallback), "message": str(message or "upstream error")}
    return {"type": fallback, "message": str(error or "upstream error")}


class CanonicalStream:
    """Feed it every upstream chunk in order; send what ``feed`` returns; call ``finish`` at the end."""

    __slots__ = ("_adapter", "_done", "_splitter", "_stop", "_usage")

    def __init__(self, adapter: str) -> None:
        if adapter not in ADAPTERS:
            raise ValueError(f"unknown adapter {adapter!r}")
        self._adapter = adapter
        self._splitter = EventSplitter()
        self._usage = stream_usage(adapter)
        self._stop: str | None = None
        self._done = False

    @property
    def usage(self) -> Usage:
        return self._usage.usage

    @property
    def done(self) -> bool:
        """True once the ``done`` event has been produced."""
        return self._done

    def feed(self, chunk: bytes) -> bytes:
        """Canonical events for the upstream events completed by ``chunk`` (often ``b""``)."""
        if not chunk or self._done:
            return b""
        buf, spans = self._splitter.split(chunk)
        out: list[bytes] = []
        for start, end, _after in spans:
            if self._done:
                break
            self._event(buf, start, end, out)
        return b"".join(out)

    def finish(self) -> bytes:
        """Whatever the end of the upstream stream completes, and ``done`` if it was not sent yet."""
        rest = self._splitter.take_rest()
        out: list[bytes] = []
        if rest and not self._done:
            self._event(rest, 0, len(rest), out)
        if not self._done:
            self._finish(out, self._stop or "error")
        return b"".join(out)

    def _finish(self, out: list[bytes], stop_reason: str | None) -> None:
        usage = self._usage.usage
        payload = {
            "stop_reason": stop_reason,
            "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
        }
        out.append(named_event(b"done", payload))
        self._done = True

    def _delta(self, out: list[bytes], text: Any) -> None:
        if isinstance(text, str) and text:
            out.append(named_event(b"delta", {"text": text}))

    def _error(self, out: list[bytes], error: Any, fallback: str) -> None:
        out.append(named_event(b"error", _error_payload(error, fallback)))
        self._stop = "error"

    def _event(self, buf: bytes, start: int, end: int, out: list[bytes]) -> None:
        event = parse_event(buf, start, end)
        if event is None:
            if self._adapter == OPENAI and event_data(buf, start, end) == b"[DONE]":
                self._finish(out, self._stop)
            return
        if self._adapter == OPENAI:
            self._chat(event, out)
        elif self._adapter == ANTHROPIC:
            self._anthropic(event, out)
        else:
            self._responses(event, out)

    def _chat(self, event: dict[str, Any], out: list[bytes]) -> None:
        if "error" in event:
            self._error(out, event["error"], "api_error")
            return
        self._usage.take(event)
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._delta(out, delta.get("content"))
        if choice.get("finish_reason") is not None:
            self._stop = chat_stop_reason(choice["finish_reason"])

    def _anthropic(self, event: dict[str, Any], out: list[bytes]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("type") == "text_delta":
                self._delta(out, delta.get("text"))
        elif kind in ("message_start", "message_delta"):
            self._usage.take(event)
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._stop = str(delta["stop_reason"])
        elif kind == "message_stop":
            self._finish(out, self._stop)
        elif kind == "error":
            self._error(out, event.get("error"), "api_error")

    def _responses(self, event: dict[str, Any], out: list[bytes]) -> None:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            self._delta(out, event.get("delta"))
        elif kind in _TERMINAL_RESPONSES:
            self._usage.take(event)
            response = event.get("response")
            if not isinstance(response, dict):
                self._finish(out, self._stop)
                return
            if kind == "response.failed":
                self._error(out, response.get("error"), "api_error")
            self._finish(out, responses_stop_reason(response))
        elif kind == "error":
            self._error(out, {"type": event.get("code"), "message": event.get("message")}, "api_error")
