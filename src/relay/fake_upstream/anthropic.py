"""Anthropic Messages (``POST /v1/messages``): the ``message`` object and its event stream."""

from __future__ import annotations

from typing import Any

from .sse import named_event, new_id
from .tokens import Completion, complete, split_deltas


def _usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _stop_reason(c: Completion) -> str:
    return "max_tokens" if c.truncated else "end_turn"


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    c = complete("messages", body)
    return {
        "id": new_id("msg_01", 11),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": c.text}],
        "stop_reason": _stop_reason(c),
        "stop_sequence": None,
        "usage": _usage(c.input_tokens, c.output_tokens),
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
        "usage": _usage(c.input_tokens, 1),
    }
    payloads: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
    ]
    payloads.extend(
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}
        for piece in split_deltas(c.text)
    )
    payloads += [
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop_reason(c), "stop_sequence": None},
            "usage": {"output_tokens": c.output_tokens},
        },
        {"type": "message_stop"},
    ]
    return [named_event(payload["type"], payload) for payload in payloads]
