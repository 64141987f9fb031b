"""OpenAI Chat Completions (``POST /v1/chat/completions``): ``chat.completion`` and its chunk stream."""

from __future__ import annotations

import time
from typing import Any

from .sse import DONE, data_event, new_id
from .tokens import Completion, complete, split_deltas

_FINGERPRINT = "fp_fake0relay"


def _usage(c: Completion) -> dict[str, Any]:
    return {
        "prompt_tokens": c.input_tokens,
        "completion_tokens": c.output_tokens,
        "total_tokens": c.input_tokens + c.output_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }


def _finish_reason(c: Completion) -> str:
    return "length" if c.truncated else "stop"


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    c = complete("chat", body)
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": c.text, "refusal": None, "annotations": []},
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

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events.extend(chunk({"content": piece}) for piece in split_deltas(c.text))
    events.append(chunk({}, _finish_reason(c)))
    if include_usage:
        events.append(data_event({**base, "choices": [], "usage": _usage(c)}))
    events.append(DONE)
    return events
