"""Where a stream's answer text is, in each caller's shape (SPEC §20): what the guarded stream of
``sse.py`` reads and rewrites, one class per shape.

What it does. Each shape says, for one parsed SSE event: which text deltas it carries and under which
key (one key per piece of answer text that is streamed on its own: a chat choice's ``index``, an
Anthropic content block's ``index``, a Responses content part ``(output_index, content_index)``, the one
text of a canonical stream); which keys' text ends at this event (their held text is released just
before it); how to write released text back; how to build a delta that carries a key's held text (from
the last delta of that key); how to encode an event; and the shape's error event for a block
(``guardrail_blocked``, ``stage: output``). Responses also repeat the streamed text in their ``.done``
events and the terminal response: :meth:`ResponsesShape.rewrite` writes the released (redacted) text
there, and every Responses event is renumbered (``sequence_number``), since the guard drops and adds
events.

What it deliberately does not know: windows, matchers, framing of bytes into events (``sse.py``).
"""

from __future__ import annotations

from typing import Any

import orjson

from relay.adapters import ANTHROPIC, CANONICAL, OPENAI, OPENAI_RESPONSES
from relay.request.guardrails.step import GuardrailBlocked

Key = Any  # an int (chat choice, Anthropic block, canonical), or (output_index, content_index)


class StreamShape:
    """Chat completions (``data:`` only, no event names): text in ``choices[i].delta.content``, keyed by
    the choice's ``index`` (``n`` > 1 interleaves choices, each has its own window)."""

    renumbers = False  # events re-encoded with a fresh ``sequence_number`` (Responses)
    keeps_text = False  # the released text is needed again by ``rewrite`` (Responses)

    def texts(self, name: bytes | None, event: dict[str, Any]) -> list[tuple[Key, str]]:
        found: list[tuple[Key, str]] = []
        choices = event.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict):
                    delta = choice.get("delta")
                    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                        found.append((choice.get("index", 0), delta["content"]))
        return found

    def set_texts(self, event: dict[str, Any], released: dict[Key, str]) -> None:
        for choice in event["choices"]:
            if isinstance(choice, dict) and choice.get("index", 0) in released:
                choice["delta"]["content"] = released[choice.get("index", 0)]

    def ends(self, name: bytes | None, event: dict[str, Any] | None, held: list[Key]) -> list[Key]:
        """The keys (among ``held``, those with a window) whose text ends at this event."""
        if event is None:  # [DONE]
            return held
        if "error" in event:
            return held
        choices = event.get("choices")
        if not choices:  # the usage chunk
            return held
        return [c.get("index", 0) for c in choices if isinstance(c, dict) and c.get("finish_reason")]

    def carries_more(self, event: dict[str, Any]) -> bool:
        """A text event that also says something else (a role, a finish reason, a tool call) is kept
        when the window releases none of its text."""
        return any(
            isinstance(c, dict) and (c.get("finish_reason") or len(c.get("delta") or {}) > 1)
            for c in event.get("choices") or ()
        )

    def tail(self, name: bytes | None, template: dict[str, Any], key: Key, text: str) -> dict[str, Any]:
        event: dict[str, Any] = orjson.loads(orjson.dumps(template))
        choice = next(c for c in event["choices"] if isinstance(c, dict) and c.get("index", 0) == key)
        choice["delta"] = {"content": text}
        choice["finish_reason"] = None
        event["choices"] = [choice]
        return event

    def rewrite(self, name: bytes | None, event: dict[str, Any], released: dict[Key, str]) -> bool:
        return False

    def encode(self, name: bytes | None, event: dict[str, Any]) -> bytes:
        return b"data: " + orjson.dumps(event) + b"\n\n"

    def error(self, blocked: GuardrailBlocked) -> bytes:
        error = {
            "message": blocked.message,
            "type": "invalid_request_error",
            "code": blocked.code,
            "stage": "output",
        }
        return b"data: " + orjson.dumps({"error": error}) + b"\n\n"


class _Named(StreamShape):
    """Shapes whose events are named (``event: <type>``)."""

    def encode(self, name: bytes | None, event: dict[str, Any]) -> bytes:
        label = name if name is not None else str(event.get("type", "")).encode()
        return b"event: " + label + b"\ndata: " + orjson.dumps(event) + b"\n\n"


class AnthropicShape(_Named):
    """Text in ``content_block_delta`` / ``text_delta``, keyed by the content block's ``index``."""

    def texts(self, name: bytes | None, event: dict[str, Any]) -> list[tuple[Key, str]]:
        delta = event.get("delta")
        if (
            event.get("type") == "content_block_delta"
            and isinstance(delta, dict)
            and delta.get("type") == "text_delta"
            and isinstance(delta.get("text"), str)
        ):
            return [(event.get("index", 0), delta["text"])]
        return []

    def set_texts(self, event: dict[str, Any], released: dict[Key, str]) -> None:
        event["delta"]["text"] = released[event.get("index", 0)]

    def ends(self, name: bytes | None, event: dict[str, Any] | None, held: list[Key]) -> list[Key]:
        if event is None:
            return []
        kind = event.get("type")
        if kind == "content_block_stop":
            return [event.get("index", 0)]
        if kind in ("message_delta", "message_stop", "error"):
            return held
        return []

    def carries_more(self, event: dict[str, Any]) -> bool:
        return False

    def tail(self, name: bytes | None, template: dict[str, Any], key: Key, text: str) -> dict[str, Any]:
        return {**template, "delta": {**template["delta"], "text": text}}

    def error(self, blocked: GuardrailBlocked) -> bytes:
        error = {"type": "invalid_request_error", "message": blocked.message, "stage": "output"}
        return b"event: error\ndata: " + orjson.dumps({"type": "error", "error": error}) + b"\n\n"


_RESPONSES_TEXT = {"response.output_text.delta": "text", "response.refusal.delta": "refusal"}
_RESPONSES_DONE = {"response.output_text.done": "text", "response.refusal.done": "refusal"}
_RESPONSES_END = frozenset(("response.completed", "response.incomplete", "response.failed", "error"))


class ResponsesShape(_Named):
    """Text in ``response.output_text.delta`` (and ``response.refusal.delta``), keyed by
    ``(output_index, content_index)``; repeated whole in ``.done`` events and the terminal response."""

    renumbers = True
    keeps_text = True

    def __init__(self) -> None:
        self._seq = 0

    def texts(self, name: bytes | None, event: dict[str, Any]) -> list[tuple[Key, str]]:
        if event.get("type") in _RESPONSES_TEXT and isinstance(event.get("delta"), str):
            return [(_key(event), event["delta"])]
        return []

    def set_texts(self, event: dict[str, Any], released: dict[Key, str]) -> None:
        event["delta"] = released[_key(event)]

    def ends(self, name: bytes | None, event: dict[str, Any] | None, held: list[Key]) -> list[Key]:
        if event is None:
            return held
        kind = event.get("type")
        if kind in _RESPONSES_END:
            return held
        if kind in _RESPONSES_DONE or kind == "response.content_part.done":
            return [_key(event)]
        if kind == "response.output_item.done":
            return [k for k in held if k[0] == event.get("output_index")]  # every part of that item
        return []

    def carries_more(self, event: dict[str, Any]) -> bool:
        return False

    def tail(self, name: bytes | None, template: dict[str, Any], key: Key, text: str) -> dict[str, Any]:
        return {**template, "delta": text}

    def rewrite(self, name: bytes | None, event: dict[str, Any], released: dict[Key, str]) -> bool:
        """Writes the released text into the events that repeat a part's whole text."""
        kind = event.get("type")
        if kind in _RESPONSES_DONE:
            if _key(event) in released:
                event[_RESPONSES_DONE[kind]] = released[_key(event)]
        elif kind == "response.content_part.done":
            _set_part(event.get("part"), released.get(_key(event)))
        elif kind == "response.output_item.done":
            _set_item(event.get("item"), event.get("output_index"), released)
        elif kind in _RESPONSES_END and isinstance(event.get("response"), dict):
            output = event["response"].get("output")
            for index, item in enumerate(output if isinstance(output, list) else ()):
                _set_item(item, index, released)
        return True

    def encode(self, name: bytes | None, event: dict[str, Any]) -> bytes:
        if "sequence_number" in event:
            event["sequence_number"] = self._seq
        self._seq += 1
        return super().encode(name, event)

    def error(self, blocked: GuardrailBlocked) -> bytes:
        payload = {
            "type": "error",
            "sequence_number": self._seq,
            "code": blocked.code,
            "message": blocked.message,
            "param": None,
            "stage": "output",
        }
        self._seq += 1
        return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


def _key(event: dict[str, Any]) -> Key:
    return (event.get("output_index", 0), event.get("content_index", 0))


def _set_part(part: Any, text: str | None) -> None:
    if text is None or not isinstance(part, dict):
        return
    field = "refusal" if part.get("type") == "refusal" else "text"
    if isinstance(part.get(field), str):
        part[field] = text


def _set_item(item: Any, output_index: Any, released: dict[Key, str]) -> None:
    content = item.get("content") if isinstance(item, dict) else None
    for index, part in enumerate(content if isinstance(content, list) else ()):
        _set_part(part, released.get((output_index, index)))


class CanonicalShape(_Named):
    """Relay's ``/v1/generate`` stream (SPEC §7.2): ``event: delta`` / ``{"text"}``, one text (key 0);
    ``done`` and ``error`` end it."""

    def texts(self, name: bytes | None, event: dict[str, Any]) -> list[tuple[Key, str]]:
        if name == b"delta" and isinstance(event.get("text"), str):
            return [(0, event["text"])]
        return []

    def set_texts(self, event: dict[str, Any], released: dict[Key, str]) -> None:
        event["text"] = released[0]

    def ends(self, name: bytes | None, event: dict[str, Any] | None, held: list[Key]) -> list[Key]:
        return held if name in (b"done", b"error") else []

    def carries_more(self, event: dict[str, Any]) -> bool:
        return False

    def tail(self, name: bytes | None, template: dict[str, Any], key: Key, text: str) -> dict[str, Any]:
        return {**template, "text": text}

    def error(self, blocked: GuardrailBlocked) -> bytes:
        payload = {
            "type": "invalid_request_error",
            "code": blocked.code,
            "message": blocked.message,
            "stage": "output",
        }
        return b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"


SHAPES = {
    OPENAI: StreamShape,
    ANTHROPIC: AnthropicShape,
    OPENAI_RESPONSES: ResponsesShape,
    CANONICAL: CanonicalShape,
}
"""Every caller shape that streams: each one's stream passes through the guard (SPEC §20)."""
