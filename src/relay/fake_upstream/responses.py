"""OpenAI Responses API (``POST /v1/responses``): the ``response`` object and its typed event stream.

When ``max_output_tokens`` cuts the reply the response is ``incomplete`` (reason ``max_output_tokens``)
and the stream ends with ``response.incomplete`` instead of ``response.completed``, as the real API does.
"""

from __future__ import annotations

import time
from typing import Any

from .sse import named_event, new_id
from .tokens import Completion, complete, split_deltas


def _usage(c: Completion) -> dict[str, Any]:
    return {
        "input_tokens": c.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": c.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": c.input_tokens + c.output_tokens,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _message(item_id: str, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "content": content, "role": "assistant"}


def _envelope(body: dict[str, Any], model: str, resp_id: str, created: int) -> dict[str, Any]:
    """The response object as of ``response.created``: request settings echoed, no output yet."""
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": model,
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": body.get("store", True),
        "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": None,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
    }


def _finish(envelope: dict[str, Any], c: Completion, item_id: str) -> dict[str, Any]:
    status = "incomplete" if c.truncated else "completed"
    return {
        **envelope,
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if c.truncated else None,
        "output": [_message(item_id, status, [_text_part(c.text)])],
        "usage": _usage(c),
    }


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    c = complete("responses", body)
    envelope = _envelope(body, model, new_id("resp_", 24), int(time.time()))
    return _finish(envelope, c, new_id("msg_", 24))


def render_stream(body: dict[str, Any], model: str) -> list[bytes]:
    c = complete("responses", body)
    envelope = _envelope(body, model, new_id("resp_", 24), int(time.time()))
    item_id = new_id("msg_", 24)
    final = _finish(envelope, c, item_id)
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    payloads: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": envelope}),
        ("response.in_progress", {"response": envelope}),
        ("response.output_item.added", {"output_index": 0, "item": _message(item_id, "in_progress", [])}),
        ("response.content_part.added", {**at, "part": _text_part("")}),
    ]
    payloads.extend(
        ("response.output_text.delta", {**at, "delta": piece, "logprobs": []})
        for piece in split_deltas(c.text)
    )
    payloads += [
        ("response.output_text.done", {**at, "text": c.text, "logprobs": []}),
        ("response.content_part.done", {**at, "part": _text_part(c.text)}),
        ("response.output_item.done", {"output_index": 0, "item": final["output"][0]}),
        ("response.incomplete" if c.truncated else "response.completed", {"response": final}),
    ]
    return [
        named_event(name, {"type": name, "sequence_number": seq, **payload})
        for seq, (name, payload) in enumerate(payloads)
    ]
