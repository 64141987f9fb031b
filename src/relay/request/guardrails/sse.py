"""Output guardrails on a stream in the caller's shape (SPEC §20): the SSE events of an OpenAI chat or
Anthropic messages stream rewritten through a :class:`~relay.request.guardrails.window.StreamWindow`.

What it does. :meth:`GuardedEvents.feed` takes the stream's bytes as they come (events may be split
across chunks), passes every text delta through the window, and gives back the events to send: a text
event carries what the window releases (an event left with no text and nothing else is dropped); the
held-back text is released in a delta of its own just before the event that ends the text (a finish
chunk, ``[DONE]``, ``content_block_stop``, ``message_delta``). A block ends the output with the shape's
error event (``guardrail_blocked``, ``stage: output``): nothing after it, and never the matched text.

What it deliberately does not know: Responses and canonical streams (their answers are checked whole
only), webhooks.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.adapters import ANTHROPIC
from relay.request.guardrails.step import GuardrailBlocked
from relay.request.guardrails.window import StreamWindow

#: The caller shapes whose streams pass through the window.
WINDOWED_SHAPES = frozenset(("openai", ANTHROPIC))


class GuardedEvents:
    __slots__ = ("_buffer", "_early", "_opened", "_shape", "_template", "blocked", "window")

    def __init__(self, shape: str, window: StreamWindow) -> None:
        self._shape = shape
        self.window = window
        self._buffer = b""
        self._template: dict[str, Any] | None = None  # the last text event, for the held text's delta
        self.blocked: GuardrailBlocked | None = None
        # The events before the first released text are held too: a block found before any text was
        # released is answered as a 422 before any event (SPEC §20).
        self._early = b""
        self._opened = False

    def feed(self, chunk: bytes) -> bytes:
        if self.blocked is not None:
            return b""
        self._buffer += chunk
        out: list[bytes] = []
        while self.blocked is None:
            end = self._buffer.find(b"\n\n")
            if end < 0:
                break
            raw, self._buffer = self._buffer[: end + 2], self._buffer[end + 2 :]
            out.append(self._event(raw))
        return self._opening(b"".join(out))

    def _opening(self, out: bytes) -> bytes:
        """``out`` behind the events held until the first text was released (nothing before then; a
        block before then releases nothing: the caller is answered a 422 instead)."""
        if not self._opened:
            if self.blocked is not None:
                self._early = b""
                return b""
            self._early += out
            return b""
        early, self._early = self._early, b""
        return early + out

    def finish(self) -> bytes:
        """What is left once the upstream ended (a stream that ended without its closing events)."""
        if self.blocked is not None:
            return b""
        rest, self._buffer = self._buffer, b""
        tail = self._flush() + rest
        self._opened = self.blocked is None
        return self._opening(tail)

    def _event(self, raw: bytes) -> bytes:
        data = _data(raw)
        if data is None or data == b"[DONE]":
            return self._flush() + raw if data == b"[DONE]" else raw
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return raw
        if not isinstance(event, dict):
            return raw
        text = self._text(event)
        if text is None:
            return self._flush() + raw if self._ends_text(event) else raw
        self._template = event
        released = self.window.feed(text)
        if self._ends_text(event):  # text and a finish reason in one chunk: the held text goes with it
            released += self.window.finish()
        if self.window.blocked is not None:
            return self._block()
        if not released and not self._carries_more(event):
            return b""
        self._opened = self._opened or bool(released)
        self._set_text(event, released)
        return self._encode(event)

    def _flush(self) -> bytes:
        tail = self.window.finish()
        if self.window.blocked is not None:
            return self._block()
        if not tail or self._template is None:
            return b""
        event = orjson.loads(orjson.dumps(self._template))
        if self._shape == "openai":
            event["choices"][0]["delta"] = {"content": tail}
            event["choices"][0]["finish_reason"] = None
        else:
            event["delta"]["text"] = tail
        self._opened = True
        return self._encode(event)

    def _block(self) -> bytes:
        guardrail = self.window.blocked
        assert guardrail is not None
        self.blocked = GuardrailBlocked(guardrail, "output")
        return stream_error(self._shape, self.blocked)

    def _text(self, event: dict[str, Any]) -> str | None:
        if self._shape == "openai":
            choices = event.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                delta = choices[0].get("delta")
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    return delta["content"]  # type: ignore[no-any-return]
            return None
        delta = event.get("delta")
        if (
            event.get("type") == "content_block_delta"
            and isinstance(delta, dict)
            and delta.get("type") == "text_delta"
            and isinstance(delta.get("text"), str)
        ):
            return delta["text"]  # type: ignore[no-any-return]
        return None

    def _ends_text(self, event: dict[str, Any]) -> bool:
        if self._shape == "openai":
            choices = event.get("choices")
            return not choices or any(isinstance(c, dict) and c.get("finish_reason") for c in choices)
        return event.get("type") in ("content_block_stop", "message_delta", "message_stop")

    def _carries_more(self, event: dict[str, Any]) -> bool:
        """A text event that also says something else (a role, a finish reason) is kept without text."""
        if self._shape != "openai":
            return False
        choice = event["choices"][0]
        return bool(choice.get("finish_reason")) or len(choice["delta"]) > 1

    def _set_text(self, event: dict[str, Any], text: str) -> None:
        if self._shape == "openai":
            event["choices"][0]["delta"]["content"] = text
        else:
            event["delta"]["text"] = text

    def _encode(self, event: dict[str, Any]) -> bytes:
        if self._shape == "openai":
            return b"data: " + orjson.dumps(event) + b"\n\n"
        return b"event: " + str(event.get("type", "")).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _data(raw: bytes) -> bytes | None:
    for line in raw.split(b"\n"):
        if line.startswith(b"data:"):
            return line[5:].strip()
    return None


def stream_error(shape: str, blocked: GuardrailBlocked) -> bytes:
    """The shape's error event for a block found after the stream began."""
    if shape == "openai":
        error = {
            "message": blocked.message,
            "type": "invalid_request_error",
            "code": blocked.code,
            "stage": "output",
        }
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n"
    error = {"type": "invalid_request_error", "message": blocked.message, "stage": "output"}
    return b"event: error\ndata: " + orjson.dumps({"type": "error", "error": error}) + b"\n\n"
