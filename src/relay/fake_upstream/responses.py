"""OpenAI Responses API (``POST /v1/responses``): the ``response`` object and its typed event stream.

When ``max_output_tokens`` cuts the reply the response is ``incomplete`` (reason ``max_output_tokens``)
and the stream ends with ``response.incomplete`` instead of ``response.completed``, as the real API does.
A tool call is a ``function_call`` output item (``response.function_call_arguments.delta`` pieces when
streamed); ``fake:stream_error`` ends a stream with ``response.failed`` (``scenario``).
"""

from __future__ import annotations

import time
from typing import Any

from .openai_chat import split_arguments
from .sse import named_event, new_id
from .token_counts import Completion, complete, split_deltas

STREAM_ERROR = {"code": "server_error", "message": "The server had an error while processing your request."}


def _usage(c: Completion) -> dict[str, Any]:
    return {
        "input_tokens": c.input_tokens,
        "input_tokens_details": {"cached_tokens": c.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": c.output_tokens,
        "output_tokens_details": {"reasoning_tokens": c.reasoning_tokens},
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


def _call(item_id: str, call_id: str, c: Completion, status: str) -> dict[str, Any]:
    arguments = c.tool_arguments if status == "completed" else ""
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": call_id,
        "name": c.tool_name,
    }


def _finish(envelope: dict[str, Any], c: Completion, item_id: str, call_id: str = "") -> dict[str, Any]:
    status = "incomplete" if c.truncated else "completed"
    if c.tool_name is not None:
        output = [_call(item_id, call_id, c, "completed")]
    else:
        output = [_message(item_id, status, [_text_part(c.text)])]
    return {
        **envelope,
        "status": status,
        "incomplete_details": {"reason": "max_output_tokens"} if c.truncated else None,
        "output": output,
        "usage": _usage(c),
    }


def render(body: dict[str, Any], model: str) -> dict[str, Any]:
    c = complete("responses", body)
    envelope = _envelope(body, model, new_id("resp_", 24), int(time.time()))
    if c.tool_name is not None:
        return _finish(envelope, c, new_id("fc_", 24), new_id("call_", 12))
    return _finish(envelope, c, new_id("msg_", 24))


def render_stream(body: dict[str, Any], model: str) -> list[bytes]:
    c = complete("responses", body)
    envelope = _envelope(body, model, new_id("resp_", 24), int(time.time()))
    opening: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": envelope}),
        ("response.in_progress", {"response": envelope}),
    ]
    if c.tool_name is not None:
        item_id, call_id = new_id("fc_", 24), new_id("call_", 12)
        final = _finish(envelope, c, item_id, call_id)
        at: dict[str, Any] = {"item_id": item_id, "output_index": 0}
        content = [
            (
                "response.output_item.added",
                {"output_index": 0, "item": _call(item_id, call_id, c, "in_progress")},
            )
        ]
        content += [
            ("response.function_call_arguments.delta", {**at, "delta": piece})
            for piece in split_arguments(c.tool_arguments)
        ]
        closing = [("response.function_call_arguments.done", {**at, "arguments": c.tool_arguments})]
    else:
        item_id = new_id("msg_", 24)
        final = _finish(envelope, c, item_id)
        at = {"item_id": item_id, "output_index": 0, "content_index": 0}
        content = [
            ("response.output_item.added", {"output_index": 0, "item": _message(item_id, "in_progress", [])}),
            ("response.content_part.added", {**at, "part": _text_part("")}),
        ]
        content += [
            ("response.output_text.delta", {**at, "delta": piece, "logprobs": []})
            for piece in split_deltas(c.text)
        ]
        closing = [
            ("response.output_text.done", {**at, "text": c.text, "logprobs": []}),
            ("response.content_part.done", {**at, "part": _text_part(c.text)}),
        ]
    payloads = opening + content
    if c.stream_error:
        failed = {**envelope, "status": "failed", "error": STREAM_ERROR}
        payloads.append(("response.failed", {"response": failed}))
    else:
        payloads += closing
        payloads += [
            ("response.output_item.done", {"output_index": 0, "item": final["output"][0]}),
            ("response.incomplete" if c.truncated else "response.completed", {"response": final}),
        ]
    return [
        named_event(name, {"type": name, "sequence_number": seq, **payload})
        for seq, (name, payload) in enumerate(payloads)
    ]
