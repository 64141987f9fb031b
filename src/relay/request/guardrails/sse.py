"""Output guardrails on a stream in the caller's shape (SPEC §20): the SSE events of any stream Relay
sends — OpenAI chat, Responses, Anthropic messages, canonical ``/v1/generate``, same-shape or translated
(the guard reads the stream after translation, in the caller's shape) — rewritten through windows.

What it does. :meth:`GuardedEvents.feed` takes the stream's bytes as they come (events may be split
across chunks), passes every text delta through the window of its key (one per piece of text streamed
on its own: a chat choice, a content block, a Responses content part; ``shapes.py``), and gives back the
events to send: a text event carries what its window releases (an event left with no text and nothing
else is dropped); a key's held-back text is released in a delta of its own just before the event that
ends that text (a finish chunk, ``[DONE]``, ``content_block_stop``, ``response.output_text.done``,
``done``...). Events that repeat a whole text (Responses' ``.done`` events and terminal response) carry
the released text. A block ends the output with the shape's error event (``guardrail_blocked``,
``stage: output``): nothing after it, and never the matched text. The events before the first released
text are held, so a block found before then sends nothing (the caller is answered a 422).

A window is anything with ``feed``/``finish``/``blocked``/``acted``: the regex/PII
:class:`~relay.request.guardrails.window.StreamWindow`, or the fixed texts of ``held.py`` (a stream
checked whole, by a webhook).

What it deliberately does not know: matchers, webhooks, where each shape keeps its text (``shapes``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from relay.adapters.sse import EventSplitter, event_data
from relay.domain.guardrails import Guardrail
from relay.request.guardrails.shapes import SHAPES, Key
from relay.request.guardrails.step import GuardrailBlocked


class Window(Protocol):
    blocked: Guardrail | None
    acted: list[Guardrail]

    def feed(self, text: str) -> str: ...

    def finish(self) -> str: ...


class GuardedEvents:
    __slots__ = (
        "_early",
        "_make",
        "_opened",
        "_released",
        "_shape",
        "_splitter",
        "_templates",
        "blocked",
        "blocker",
        "windows",
    )

    def __init__(self, shape: str, window: Callable[[], Window]) -> None:
        self._shape = SHAPES[shape]()
        self._make = window
        self.windows: dict[Key, Window] = {}
        self._templates: dict[Key, tuple[bytes | None, dict[str, Any]]] = {}  # last text event per key
        self._released: dict[Key, str] = {}  # all the text released per key (Responses repeat it)
        self._splitter = EventSplitter()
        self.blocked: GuardrailBlocked | None = None
        self.blocker: Guardrail | None = None
        self._early = b""
        self._opened = False

    @property
    def acted(self) -> list[Guardrail]:
        """The redact guardrails that replaced something, in any window, once each."""
        found: list[Guardrail] = []
        for window in self.windows.values():
            found.extend(g for g in window.acted if g not in found)
        return found

    def feed(self, chunk: bytes) -> bytes:
        if self.blocked is not None or not chunk:
            return b""
        buf, spans = self._splitter.split(chunk)
        out: list[bytes] = []
        for start, end, after in spans:
            if self.blocked is not None:
                break
            out.append(self._event(buf, start, end, after))
        return self._opening(b"".join(out))

    def finish(self) -> bytes:
        """What is left once the stream ended (held text of a stream that ended without its closing
        events, an event without its blank line)."""
        if self.blocked is not None:
            return b""
        rest = self._splitter.take_rest()
        tail = self._event(rest, 0, len(rest), len(rest)) if rest else b""
        if self.blocked is None:
            tail += self._flush(list(self.windows))
        self._opened = self._opened or self.blocked is None
        return self._opening(tail)

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

    def _event(self, buf: bytes, start: int, end: int, after: int) -> bytes:
        raw = buf[start:after] if after > end else buf[start:end] + b"\n\n"
        data = event_data(buf, start, end)
        shape = self._shape
        if data is None:
            return raw
        if data == b"[DONE]":
            return self._flush(shape.ends(None, None, list(self.windows))) + raw
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            return raw
        if not isinstance(event, dict):
            return raw
        name = _name(buf, start, end)
        texts = shape.texts(name, event)
        if not texts:
            out = self._flush(shape.ends(name, event, list(self.windows)))
            if self.blocked is not None:
                return out
            if shape.rewrite(name, event, self._released) or shape.renumbers:
                return out + shape.encode(name, event)
            return out + raw
        released: dict[Key, str] = {}
        for key, text in texts:
            window = self.windows.get(key)
            if window is None:
                window = self.windows[key] = self._make()
            self._templates[key] = (name, event)
            released[key] = window.feed(text)
            if window.blocked is not None:
                return self._block(window.blocked)
        before = b""
        for key in shape.ends(name, event, list(self.windows)):  # text and its end in one event
            if key in released:
                window = self.windows[key]
                released[key] += window.finish()
                if window.blocked is not None:
                    return self._block(window.blocked)
            else:
                before += self._flush([key])
                if self.blocked is not None:
                    return before
        if not any(released.values()) and not shape.carries_more(event):
            return before
        self._opened = self._opened or any(released.values())
        if shape.keeps_text:
            for key, text in released.items():
                self._released[key] = self._released.get(key, "") + text
        shape.set_texts(event, released)
        return before + shape.encode(name, event)

    def _flush(self, keys: list[Key]) -> bytes:
        """Each key's held text, in a delta of its own (or the error event, on a block)."""
        out: list[bytes] = []
        for key in keys:
            window = self.windows.get(key)
            if window is None:
                continue
            tail = window.finish()
            if window.blocked is not None:
                return b"".join(out) + self._block(window.blocked)
            if not tail:
                continue
            name, template = self._templates[key]
            if self._shape.keeps_text:
                self._released[key] = self._released.get(key, "") + tail
            self._opened = True
            out.append(self._shape.encode(name, self._shape.tail(name, template, key, tail)))
        return b"".join(out)

    def _block(self, guardrail: Guardrail) -> bytes:
        self.blocker = guardrail
        self.blocked = GuardrailBlocked(guardrail, "output")
        return self._shape.error(self.blocked)


def _name(buf: bytes, start: int, end: int) -> bytes | None:
    """The event's ``event:`` name, if it has one."""
    at = buf.find(b"event:", start, end)
    if at < 0 or (at > start and buf[at - 1 : at] not in (b"\n", b"\r")):
        return None
    stop = buf.find(b"\n", at, end)
    return buf[at + 6 : end if stop < 0 else stop].strip()
