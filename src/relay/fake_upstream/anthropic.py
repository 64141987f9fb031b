"""Anthropic Messages (``POST /v1/messages``): the ``message`` object and its event stream, with
``tool_use`` blocks (``input_json_delta`` pieces when streamed), ``stop_reason`` ``tool_use`` /
``stop_sequence``, prompt-cache reads in usage and a mid-stream ``error`` event when the request asks
(``scenario``)."""

from __future__ import annotations

from typing import Any

import orjson

from .openai_chat import split_arguments
from .sse import named_event, new_id
from .token_counts import Completion, complete, split_deltas

STREAM_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _usage(c: Completion, output_tokens: int) -> dict[str, Any]:
    """Anthropic's ``input_tokens`` excludes cache reads, which are reported apart."""
    return {
        "input_tokens": c.input_tokens - c.cached_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": c.cached_tokens,
    }


def _stop_reason(c: Completion) -> str:
    if c.tool_name is not None:
        return "tool_use"
    if c.stop_sequence is not None:
        return "stop_sequence"
    return "max_tokens" if c.truncated else "end_turn"


def _tool_block(c: Completion, tool_id: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": c.tool_name, "input": arguments}


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    c = complete("messages", body)
    content = [{"type": "text", "text": c.text}]
    if c.tool_name is not None:
        content = [_tool_block(c, new_id("toolu_01", 11), orjson.loads(c.tool_arguments))]
    return {
        "id": new_id("msg_01", 11),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _stop_reason(c),
        "stop_sequence": c.stop_sequence,
        "usage": _usage(c, c.output_tokens),
    }


def render_stream(body: dict[str, Any], model: str) -> list[bytes]:
    """message_start, content_block_start, ping, deltas, content_block_stop, message_delta, message_stop."""
    c = complete("messages", body)
    start: dict[str, Any] = {
        "id": new_id("msg_01", 11),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(c, 1),
    }
    if c.tool_name is not None:
        block = _tool_block(c, new_id("toolu_01", 11), {})
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in split_arguments(c.tool_arguments)]
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in split_deltas(c.text)]
    payloads: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "ping"},
    ]
    payloads.extend({"type": "content_block_delta", "index": 0, "delta": delta} for delta in deltas)
    if c.stream_error:
        payloads.append(STREAM_ERROR)
        return [named_event(payload["type"], payload) for payload in payloads]
    payloads += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(c), "stop_sequence": c.stop_sequence},
            "usage": {"output_tokens": c.output_tokens},
        },
        {"type": "message_stop"},
    ]
    return [named_event(payload["type"], payload) for payload in payloads]
