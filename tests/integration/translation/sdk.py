"""One caller per inbound shape, each driving the official SDK the way an application would, so the
tests can run every direction with the same assertions: ``Result`` is the caller's answer read back
into one vocabulary (text, tool call, stop, usage)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from tests.fixtures.live import Gateway

SYSTEM = "be brief"
TOOL_NAME = "get_weather"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOL_RESULT = "sunny and 21 degrees"


@dataclass
class Call:
    id: str
    name: str
    arguments: str


@dataclass
class Result:
    id: str
    model: str
    text: str
    stop: str  # the caller's own stop vocabulary
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    calls: list[Call]
    raw: Any = None


class ChatCaller:
    shape = "openai"

    def __init__(self, gw: Gateway, key: str | None = None) -> None:
        self.client = openai.OpenAI(base_url=f"{gw.url}/openai/v1", api_key=key or gw.key, max_retries=0)

    def messages(self, prompt: str | list[Any]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]

    def tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {"name": TOOL_NAME, "description": "weather", "parameters": SCHEMA},
            }
        ]

    def _result(self, r: Any) -> Result:
        choice = r.choices[0]
        calls = [Call(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        details = r.usage.prompt_tokens_details
        return Result(
            r.id,
            r.model,
            choice.message.content or "",
            choice.finish_reason,
            r.usage.prompt_tokens,
            r.usage.completion_tokens,
            details.cached_tokens if details else 0,
            calls,
            r,
        )

    def ask(
        self, model: str, prompt: str | list[Any], *, stream: bool = False, tools: bool = False, **kw: Any
    ) -> Result:
        args: dict[str, Any] = {"model": model, "messages": self.messages(prompt), **kw}
        if tools:
            args["tools"] = self.tools()
        return self._send(args, stream)

    def _send(self, args: dict[str, Any], stream: bool) -> Result:
        if not stream:
            return self._result(self.client.chat.completions.create(**args))
        with self.client.chat.completions.stream(**args, stream_options={"include_usage": True}) as s:
            for _ in s:
                pass
            return self._result(s.get_final_completion())

    def round_trip(self, model: str, prompt: str, *, stream: bool) -> tuple[Result, Result]:
        first = self.ask(model, prompt, stream=stream, tools=True)
        message = first.raw.choices[0].message
        history = [
            *self.messages(prompt),
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in first.calls
                ],
            },
            {"role": "tool", "tool_call_id": first.calls[0].id, "content": TOOL_RESULT},
        ]
        return first, self._send({"model": model, "messages": history, "tools": self.tools()}, stream)


class ResponsesCaller:
    shape = "openai_responses"

    def __init__(self, gw: Gateway, key: str | None = None) -> None:
        self.client = openai.OpenAI(base_url=f"{gw.url}/openai/v1", api_key=key or gw.key, max_retries=0)

    def tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "name": TOOL_NAME,
                "description": "weather",
                "parameters": SCHEMA,
                "strict": False,
            }
        ]

    def _result(self, r: Any) -> Result:
        calls = [Call(o.call_id, o.name, o.arguments) for o in r.output if o.type == "function_call"]
        stop = r.status if r.status == "completed" else f"incomplete:{r.incomplete_details.reason}"
        details = r.usage.input_tokens_details
        return Result(
            r.id,
            r.model,
            r.output_text,
            stop,
            r.usage.input_tokens,
            r.usage.output_tokens,
            details.cached_tokens if details else 0,
            calls,
            r,
        )

    def input(self, prompt: str | list[Any]) -> list[dict[str, Any]]:
        return [{"role": "user", "content": prompt}]

    def ask(
        self, model: str, prompt: str | list[Any], *, stream: bool = False, tools: bool = False, **kw: Any
    ) -> Result:
        args: dict[str, Any] = {"model": model, "instructions": SYSTEM, "input": self.input(prompt), **kw}
        if tools:
            args["tools"] = self.tools()
        return self._send(args, stream)

    def _send(self, args: dict[str, Any], stream: bool) -> Result:
        if not stream:
            return self._result(self.client.responses.create(**args))
        with self.client.responses.stream(**args) as s:
            for _ in s:
                pass
            return self._result(s.get_final_response())

    def round_trip(self, model: str, prompt: str, *, stream: bool) -> tuple[Result, Result]:
        first = self.ask(model, prompt, stream=stream, tools=True)
        call = first.calls[0]
        items = [
            *self.input(prompt),
            {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.id, "output": TOOL_RESULT},
        ]
        args = {"model": model, "instructions": SYSTEM, "input": items, "tools": self.tools()}
        return first, self._send(args, stream)


class MessagesCaller:
    shape = "anthropic"

    def __init__(self, gw: Gateway, key: str | None = None) -> None:
        self.client = anthropic.Anthropic(
            base_url=f"{gw.url}/anthropic", api_key=key or gw.key, max_retries=0
        )

    def tools(self) -> list[dict[str, Any]]:
        return [{"name": TOOL_NAME, "description": "weather", "input_schema": SCHEMA}]

    def _result(self, r: Any) -> Result:
        text = "".join(b.text for b in r.content if b.type == "text")
        calls = [Call(b.id, b.name, json.dumps(b.input)) for b in r.content if b.type == "tool_use"]
        u = r.usage
        cached = u.cache_read_input_tokens or 0
        total = u.input_tokens + cached + (u.cache_creation_input_tokens or 0)
        return Result(r.id, r.model, text, r.stop_reason, total, u.output_tokens, cached, calls, r)

    def ask(
        self, model: str, prompt: str | list[Any], *, stream: bool = False, tools: bool = False, **kw: Any
    ) -> Result:
        args: dict[str, Any] = {
            "model": model,
            "max_tokens": kw.pop("max_tokens", 100),
            "system": SYSTEM,
            "messages": [{"role": "user", "content": prompt}],
            **kw,
        }
        if tools:
            args["tools"] = self.tools()
        return self._send(args, stream)

    def _send(self, args: dict[str, Any], stream: bool) -> Result:
        if not stream:
            return self._result(self.client.messages.create(**args))
        with self.client.messages.stream(**args) as s:
            for _ in s:
                pass
            return self._result(s.get_final_message())

    def round_trip(self, model: str, prompt: str, *, stream: bool) -> tuple[Result, Result]:
        first = self.ask(model, prompt, stream=stream, tools=True)
        blocks = [b.model_dump(exclude_none=True) for b in first.raw.content]
        messages = [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": blocks},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": first.calls[0].id, "content": TOOL_RESULT}
                ],
            },
        ]
        args = {
            "model": model,
            "max_tokens": 100,
            "system": SYSTEM,
            "messages": messages,
            "tools": self.tools(),
        }
        return first, self._send(args, stream)


CALLERS = {"openai": ChatCaller, "openai_responses": ResponsesCaller, "anthropic": MessagesCaller}
