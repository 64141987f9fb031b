"""OpenAI chat stream ↔ IR stream events, one event at a time (SPEC §7.3 "Stream").

What it knows: a chat stream is ``data: {chat.completion.chunk}`` events — a first chunk with
``delta.role``, ``delta.content`` text pieces, ``delta.tool_calls[] {index, id?, function {name?,
arguments}}`` pieces, a chunk with ``finish_reason``, the usage chunk (``choices: []``) when
``stream_options.include_usage`` was set — ending with ``data: [DONE]``; an error mid-stream is a
``data: {"error": {...}}`` event (what the openai SDK raises on).

What it deliberately does not know: framing (``relay.adapters.sse``), other shapes, sockets.

Invariants: ``ChatDecoder.take`` and ``ChatEncoder.take`` never buffer: each upstream event yields its
IR events at once, each IR event its bytes at once. The encoder sends the usage chunk only when the
caller asked for it, and always ends with ``[DONE]`` unless an error event ended the stream.
"""

from __future__ import annotations

import time
from typing import Any

from . import ir
from .chat_ir import FINISH_TO_STOP, STOP_TO_FINISH, chat_usage, usage_to_chat
from .json_codec import dumps
from .params import obj


class ChatDecoder:
    __slots__ = ("_started", "_tools")

    def __init__(self) -> None:
        self._started = False
        self._tools: set[int] = set()

    def done(self) -> list[ir.Event]:
        return [ir.End()]

    def take(self, chunk: dict[str, Any]) -> list[ir.Event]:
        error = chunk.get("error")
        if error is not None:
            if isinstance(error, dict):
                return [
                    ir.StreamError(str(error.get("type") or "api_error"), str(error.get("message") or ""))
                ]
            return [ir.StreamError("api_error", str(error))]
        out: list[ir.Event] = []
        if not self._started:
            self._started = True
            created = chunk.get("created")
            out.append(ir.Start(str(chunk.get("id", "")), created if type(created) is int else None))
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta, out)
            reason = choice.get("finish_reason")
            if reason is not None:
                out.append(ir.Stop(FINISH_TO_STOP.get(reason, ir.END_TURN)))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            out.append(ir.UsageUpdate(chat_usage(usage)))
        return out

    def _delta(self, delta: dict[str, Any], out: list[ir.Event]) -> None:
        for key in ("content", "refusal"):
            text = delta.get(key)
            if isinstance(text, str) and text:
                out.append(ir.TextDelta(text))
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            return
        for call in calls:
            if not isinstance(call, dict):
                continue
            index = call.get("index", 0)
            index = index if type(index) is int else 0
            fn = obj(call.get("function"))
            if index not in self._tools:
                self._tools.add(index)
                out.append(ir.ToolStart(index, str(call.get("id") or ""), str(fn.get("name") or "")))
            args = fn.get("arguments")
            if isinstance(args, str) and args:
                out.append(ir.ToolArgs(index, args))


class ChatEncoder:
    __slots__ = ("_base", "_include_usage", "_model", "_prefix", "_usage", "ended")

    def __init__(self, model: str, include_usage: bool = False) -> None:
        self._model = model
        self._include_usage = include_usage
        self._base: dict[str, Any] | None = None
        self._prefix: bytes | None = None  # every chunk's bytes up to its ``choices`` list
        self._usage = ir.Usage()
        self.ended = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        """``data: {**base, "choices": [choice]}``, with the base (the same in every chunk) written once."""
        prefix = self._prefix
        if prefix is None:
            prefix = self._prefix = b"data: " + dumps(self._start("", None))[:-1] + b',"choices":['
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return prefix + dumps(choice) + b"]}\n\n"

    def _start(self, resp_id: str, created: int | None) -> dict[str, Any]:
        if self._base is None:
            self._base = {
                "id": resp_id,
                "object": "chat.completion.chunk",
                "created": created if created is not None else int(time.time()),
                "model": self._model,
            }
        return self._base

    def take(self, event: ir.Event) -> bytes:
        if self.ended:
            return b""
        if isinstance(event, ir.Start):
            self._start(event.id, event.created)
            return self._chunk({"role": "assistant", "content": ""})
        if isinstance(event, ir.TextDelta):
            return self._chunk({"content": event.text})
        if isinstance(event, ir.ToolStart):
            call = {"index": event.index, "id": event.id, "type": "function"}
            return self._chunk({"tool_calls": [{**call, "function": {"name": event.name, "arguments": ""}}]})
        if isinstance(event, ir.ToolArgs):
            return self._chunk(
                {"tool_calls": [{"index": event.index, "function": {"arguments": event.fragment}}]}
            )
        if isinstance(event, ir.UsageUpdate):
            self._usage = event.usage
            return b""
        if isinstance(event, ir.Stop):
            return self._chunk({}, STOP_TO_FINISH.get(event.reason, "stop"))
        self.ended = True
        if isinstance(event, ir.StreamError):
            error = {"message": event.message, "type": event.type, "code": event.type}
            return b"data: " + dumps({"error": error}) + b"\n\n"
        out = b""
        if self._include_usage:
            base = self._start("", None)
            out = b"data: " + dumps({**base, "choices": [], "usage": usage_to_chat(self._usage)}) + b"\n\n"
        return out + b"data: [DONE]\n\n"
