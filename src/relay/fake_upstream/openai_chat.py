"""OpenAI Chat Completions (``POST /v1/chat/completions``): ``chat.completion`` and its chunk stream,
with tool calls (``message.tool_calls``, ``delta.tool_calls`` pieces), ``finish_reason`` ``tool_calls``,
cached prompt tokens and a mid-stream ``{"error": …}`` event when the request asks (``scenario``)."""

from __future__ import annotations

import time
from typing import Any

from .sse import DONE, data_event, new_id
from .token_counts import Completion, complete, split_deltas

STREAM_ERROR = {"message": "The server had an error while processing your request.", "type": "server_error"}

_FINGERPRINT = "fp_fake0relay"


def _usage(c: Completion) -> dict[str, Any]:
    return {
        "prompt_tokens": c.input_tokens,
        "completion_tokens": c.output_tokens,
        "total_tokens": c.input_tokens + c.output_tokens,
        "prompt_tokens_details": {"cached_tokens": c.cached_tokens, "cache_write_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": c.reasoning_tokens},
    }


def _finish_reason(c: Completion) -> str:
    if c.tool_name is not None:
        return "tool_calls"
    return "length" if c.truncated else "stop"


def split_arguments(arguments: str, parts: int = 3) -> list[str]:
    """A tool call's JSON arguments in a few pieces, as the API streams them."""
    size = max(1, -(-len(arguments) // parts))
    return [arguments[i : i + size] for i in range(0, len(arguments), size)] or [""]


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    c = complete("chat", body)
    message: dict[str, Any] = {"role": "assistant", "content": c.text, "refusal": None, "annotations": []}
    if c.tool_name is not None:
        function = {"name": c.tool_name, "arguments": c.tool_arguments}
        message["content"] = None
        message["tool_calls"] = [{"id": new_id("call_"), "type": "function", "function": function}]
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(c),
            }
        ],
        "usage": _usage(c),
        "service_tier": "default",
        "system_fingerprint": _FINGERPRINT,
    }


def _include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def render_stream(body: dict[str, Any], model: str) -> list[bytes]:
    """Role chunk, content chunks, finish chunk, optional usage chunk (empty choices), ``[DONE]``."""
    c = complete("chat", body)
    include_usage = _include_usage(body)
    base: dict[str, Any] = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "service_tier": "default",
        "system_fingerprint": _FINGERPRINT,
    }
    if include_usage:
        base["usage"] = None  # the real API sends an explicit null on every chunk but the last

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return data_event({**base, "choices": [choice]})

    if c.tool_name is not None:
        events = [chunk({"role": "assistant", "content": None, "refusal": None})]
        call = {"index": 0, "id": new_id("call_"), "type": "function"}
        events.append(chunk({"tool_calls": [{**call, "function": {"name": c.tool_name, "arguments": ""}}]}))
        events.extend(
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
            for piece in split_arguments(c.tool_arguments)
        )
    else:
        events = [chunk({"role": "assistant", "content": "", "refusal": None})]
        events.extend(chunk({"content": piece}) for piece in split_deltas(c.text))
    if c.stream_error:
        events.append(data_event({"error": {**STREAM_ERROR, "param": None, "code": None}}))
        return events
    events.append(chunk({}, _finish_reason(c)))
    if include_usage:
        events.append(data_event({**base, "choices": [], "usage": _usage(c)}))
    events.append(DONE)
    return events
