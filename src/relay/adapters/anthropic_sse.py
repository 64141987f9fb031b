"""Anthropic Messages stream ↔ IR stream events, one event at a time (SPEC §7.3 "Stream").

What it knows: ``message_start`` (id, input usage), ``content_block_start`` (``text`` or ``tool_use``
with id and name), ``content_block_delta`` (``text_delta``, ``input_json_delta``), ``content_block_stop``,
``message_delta`` (stop reason, stop sequence, cumulative usage), ``message_stop``, ``ping``, and the
``error`` event. Blocks are contiguous: the encoder closes the open block before it starts another, so
tool-call argument pieces must follow their call's start (as every provider streams them).

What it deliberately does not know: framing, other shapes, sockets.

Invariants: no buffering (each event in, its events out); usage fields the encoder has not been told
of yet are 0 in ``message_start``, and the ``message_delta`` carries every count (input included, as a
cumulative value), which the anthropic SDK reads.
"""

from __future__ import annotations

from typing import Any

from . import ir
from .anthropic_ir import anthropic_usage, stop_from_anthropic, stop_to_anthropic, usage_to_anthropic
from .params import obj
from .sse import named_event

ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
        "timeout_error",
    }
)
"""Anthropic's ``error.type`` vocabulary; any other upstream type reaches the caller as ``api_error``."""


class AnthropicDecoder:
    __slots__ = ("_blocks", "_usage")

    def __init__(self) -> None:
        self._blocks: dict[Any, int] = {}  # content block index -> tool ordinal
        self._usage = ir.Usage()

    def done(self) -> list[ir.Event]:
        return []

    def take(self, event: dict[str, Any]) -> list[ir.Event]:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = obj(event.get("delta"))
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                return [ir.TextDelta(delta["text"])] if delta["text"] else []
            if delta.get("type") == "input_json_delta" and event.get("index") in self._blocks:
                fragment = delta.get("partial_json")
                if isinstance(fragment, str) and fragment:
                    return [ir.ToolArgs(self._blocks[event["index"]], fragment)]
            return []
        if kind == "content_block_start":
            block = obj(event.get("content_block"))
            if block.get("type") == "tool_use":
                ordinal = len(self._blocks)
                self._blocks[event.get("index")] = ordinal
                return [ir.ToolStart(ordinal, str(block.get("id", "")), str(block.get("name", "")))]
            text = block.get("text")
            return (
                [ir.TextDelta(text)] if block.get("type") == "text" and isinstance(text, str) and text else []
            )
        if kind == "message_start":
            message = obj(event.get("message"))
            self._usage = anthropic_usage(message.get("usage"))
            return [ir.Start(str(message.get("id", ""))), ir.UsageUpdate(self._usage)]
        if kind == "message_delta":
            self._usage = anthropic_usage(event.get("usage"), self._usage)
            out: list[ir.Event] = [ir.UsageUpdate(self._usage)]
            delta = obj(event.get("delta"))
            if delta.get("stop_reason") is not None:
                sequence = delta.get("stop_sequence")
                out.append(
                    ir.Stop(
                        stop_from_anthropic(delta["stop_reason"]),
                        sequence if isinstance(sequence, str) else None,
                    )
                )
            return out
        if kind == "message_stop":
            return [ir.End()]
        if kind == "error":
            error = obj(event.get("error"))
            return [ir.StreamError(str(error.get("type") or "api_error"), str(error.get("message") or ""))]
        return []


class AnthropicEncoder:
    __slots__ = ("_blocks", "_model", "_open", "_started", "_stop", "_usage", "ended")

    def __init__(self, model: str, include_usage: bool = False) -> None:
        self._model = model
        self._started = False
        self._blocks = 0  # content blocks started so far
        self._open: tuple[str, int] | None = None  # ("text", -1) or ("tool", ordinal) of the open block
        self._usage = ir.Usage()
        self._stop = ir.Stop(ir.END_TURN)
        self.ended = False

    def _start(self, resp_id: str) -> bytes:
        if self._started:
            return b""
        self._started = True
        message: dict[str, Any] = {
            "id": resp_id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage_to_anthropic(self._usage), "output_tokens": 0},
        }
        return named_event(b"message_start", {"type": "message_start", "message": message})

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return named_event(b"content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})

    def _open_block(self, key: tuple[str, int], block: dict[str, Any]) -> bytes:
        out = self._start("") + self._close()
        self._open = key
        self._blocks += 1
        payload = {"type": "content_block_start", "index": self._blocks - 1, "content_block": block}
        return out + named_event(b"content_block_start", payload)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        payload = {"type": "content_block_delta", "index": self._blocks - 1, "delta": delta}
        return named_event(b"content_block_delta", payload)

    def take(self, event: ir.Event) -> bytes:
        if self.ended:
            return b""
        if isinstance(event, ir.Start):
            return self._start(event.id)
        if isinstance(event, ir.TextDelta):
            out = (
                b""
                if self._open == ("text", -1)
                else self._open_block(("text", -1), {"type": "text", "text": ""})
            )
            return out + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, ir.ToolStart):
            block = {"type": "tool_use", "id": event.id, "name": event.name, "input": {}}
            return self._open_block(("tool", event.index), block)
        if isinstance(event, ir.ToolArgs):
            if self._open != ("tool", event.index):
                return b""  # pieces of a call whose block is closed cannot be placed (see docstring)
            return self._delta({"type": "input_json_delta", "partial_json": event.fragment})
        if isinstance(event, ir.UsageUpdate):
            self._usage = event.usage
            return b""
        if isinstance(event, ir.Stop):
            self._stop = event
            return b""
        self.ended = True
        if isinstance(event, ir.StreamError):
            kind = event.type if event.type in ERROR_TYPES else "api_error"
            error = {"type": "error", "error": {"type": kind, "message": event.message}}
            return self._start("") + named_event(b"error", error)
        delta = {
            "stop_reason": stop_to_anthropic(self._stop.reason),
            "stop_sequence": self._stop.sequence if self._stop.reason == ir.STOP_SEQUENCE else None,
        }
        final = {"type": "message_delta", "delta": delta, "usage": usage_to_anthropic(self._usage)}
        return (
            self._start("")
            + self._close()
            + named_event(b"message_delta", final)
            + named_event(b"message_stop", {"type": "message_stop"})
        )
