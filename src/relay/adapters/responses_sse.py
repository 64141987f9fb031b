"""OpenAI Responses stream ↔ IR stream events, one event at a time (SPEC §7.3 "Stream").

What it knows: the typed events ``response.created``, ``response.in_progress``,
``response.output_item.added`` / ``.done`` (``message`` and ``function_call`` items),
``response.content_part.added`` / ``.done``, ``response.output_text.delta`` / ``.done``,
``response.refusal.delta``, ``response.function_call_arguments.delta`` / ``.done``, and the terminal
``response.completed`` / ``response.incomplete`` (usage, status) / ``response.failed`` and ``error``.
Every event carries ``sequence_number``.

What it deliberately does not know: framing, other shapes, sockets.

Invariants: no buffering of output: each IR event is written at once. The encoder keeps the text and
arguments streamed so far only to repeat them in the ``.done`` events and the terminal response, as
the real API does.
"""

from __future__ import annotations

from typing import Any

from . import ir
from .params import obj
from .responses_ir import call_item, envelope, finished, message_item, responses_usage, stop_from_status
from .sse import named_event

_TERMINAL = frozenset({"response.completed", "response.incomplete"})


class ResponsesDecoder:
    __slots__ = ("_calls", "_items")

    def __init__(self) -> None:
        self._items: dict[Any, int] = {}  # function-call item id / output index -> tool ordinal
        self._calls = 0

    def done(self) -> list[ir.Event]:
        return []

    def take(self, event: dict[str, Any]) -> list[ir.Event]:
        kind = event.get("type")
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = event.get("delta")
            return [ir.TextDelta(delta)] if isinstance(delta, str) and delta else []
        if kind == "response.function_call_arguments.delta":
            ordinal = self._items.get(
                event.get("item_id"), self._items.get(("out", event.get("output_index")))
            )
            delta = event.get("delta")
            return (
                [ir.ToolArgs(ordinal, delta)]
                if ordinal is not None and isinstance(delta, str) and delta
                else []
            )
        if kind == "response.output_item.added":
            item = obj(event.get("item"))
            if item.get("type") != "function_call":
                return []
            ordinal = self._calls
            self._calls += 1
            self._items[item.get("id")] = ordinal
            self._items[("out", event.get("output_index"))] = ordinal
            args = item.get("arguments")
            out: list[ir.Event] = [
                ir.ToolStart(ordinal, str(item.get("call_id", "")), str(item.get("name", "")))
            ]
            if isinstance(args, str) and args:
                out.append(ir.ToolArgs(ordinal, args))
            return out
        response = obj(event.get("response"))
        if kind == "response.created":
            created = response.get("created_at")
            return [ir.Start(str(response.get("id", "")), created if type(created) is int else None)]
        if kind in _TERMINAL:
            stop = stop_from_status(response, self._calls > 0)
            return [ir.UsageUpdate(responses_usage(response.get("usage"))), ir.Stop(stop), ir.End()]
        if kind == "response.failed":
            error = obj(response.get("error"))
            return [ir.StreamError(str(error.get("code") or "api_error"), str(error.get("message") or ""))]
        if kind == "error":
            return [ir.StreamError(str(event.get("code") or "api_error"), str(event.get("message") or ""))]
        return []


class ResponsesEncoder:
    __slots__ = ("_env", "_model", "_open", "_output", "_seq", "_stop", "_tools", "_usage", "ended")

    def __init__(self, model: str, include_usage: bool = False) -> None:
        self._model = model
        self._env: dict[str, Any] | None = None
        self._seq = 0
        self._output: list[dict[str, Any]] = []  # items so far (the open one is the last)
        self._open: dict[str, Any] | None = None
        self._tools: dict[int, int] = {}  # tool ordinal -> output index
        self._usage = ir.Usage()
        self._stop = ir.END_TURN
        self.ended = False

    def _event(self, name: str, payload: dict[str, Any]) -> bytes:
        body = {"type": name, "sequence_number": self._seq, **payload}
        self._seq += 1
        return named_event(name.encode(), body)

    def _start(self, resp_id: str, created: int | None) -> bytes:
        if self._env is not None:
            return b""
        self._env = envelope(resp_id, self._model, created)
        return self._event("response.created", {"response": self._env}) + self._event(
            "response.in_progress", {"response": self._env}
        )

    def _close(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        at = {"item_id": item["id"], "output_index": len(self._output) - 1}
        if item["type"] == "message":
            text = item["text"]
            part = {"type": "output_text", "text": text, "annotations": []}
            done = message_item(item["id"], text)
            self._output[-1] = done
            return (
                self._event(
                    "response.output_text.done", {**at, "content_index": 0, "text": text, "logprobs": []}
                )
                + self._event("response.content_part.done", {**at, "content_index": 0, "part": part})
                + self._event("response.output_item.done", {"output_index": at["output_index"], "item": done})
            )
        done = call_item(ir.ToolCall(item["call_id"], item["name"], item["arguments"]))
        self._output[-1] = done
        return self._event(
            "response.function_call_arguments.done", {**at, "arguments": item["arguments"]}
        ) + self._event("response.output_item.done", {"output_index": at["output_index"], "item": done})

    def take(self, event: ir.Event) -> bytes:
        if self.ended:
            return b""
        if isinstance(event, ir.Start):
            return self._start(event.id, event.created)
        if isinstance(event, ir.TextDelta):
            out = b""
            if self._open is None or self._open["type"] != "message":
                out = self._start("", None) + self._close()
                item_id = f"msg_{len(self._output)}_{self._env['id'] if self._env else ''}"
                self._open = {"type": "message", "id": item_id, "text": ""}
                added = message_item(item_id, "", "in_progress")
                self._output.append(added)
                index = len(self._output) - 1
                part = {"type": "output_text", "text": "", "annotations": []}
                out += self._event("response.output_item.added", {"output_index": index, "item": added})
                out += self._event(
                    "response.content_part.added",
                    {"item_id": item_id, "output_index": index, "content_index": 0, "part": part},
                )
            self._open["text"] += event.text
            at = {"item_id": self._open["id"], "output_index": len(self._output) - 1, "content_index": 0}
            return out + self._event(
                "response.output_text.delta", {**at, "delta": event.text, "logprobs": []}
            )
        if isinstance(event, ir.ToolStart):
            out = self._start("", None) + self._close()
            call = ir.ToolCall(event.id, event.name, "")
            added = call_item(call, "in_progress")
            self._output.append(added)
            self._tools[event.index] = len(self._output) - 1
            self._open = {
                "type": "call",
                "id": added["id"],
                "call_id": event.id,
                "name": event.name,
                "arguments": "",
            }
            return out + self._event(
                "response.output_item.added", {"output_index": len(self._output) - 1, "item": added}
            )
        if isinstance(event, ir.ToolArgs):
            if (
                self._open is None
                or self._open["type"] != "call"
                or self._tools.get(event.index) != len(self._output) - 1
            ):
                return b""
            self._open["arguments"] += event.fragment
            at = {"item_id": self._open["id"], "output_index": len(self._output) - 1}
            return self._event("response.function_call_arguments.delta", {**at, "delta": event.fragment})
        if isinstance(event, ir.UsageUpdate):
            self._usage = event.usage
            return b""
        if isinstance(event, ir.Stop):
            self._stop = event.reason
            return b""
        self.ended = True
        if isinstance(event, ir.StreamError):
            payload = {"code": event.type, "message": event.message, "param": None}
            return self._start("", None) + self._event("error", payload)
        out = self._start("", None) + self._close()
        assert self._env is not None
        final = finished(self._env, self._output, self._stop, self._usage)
        name = "response.completed" if final["status"] == "completed" else "response.incomplete"
        return out + self._event(name, {"response": final})
