"""OpenAI Responses ↔ the internal representation (SPEC §7.3): requests and whole responses.

What it knows: the Responses request fields translation maps — ``instructions``; ``input`` as a string
or items (``message`` items of role ``user``/``assistant``/``system``/``developer`` with ``input_text``,
``input_image``, ``output_text`` and ``refusal`` parts; ``function_call`` and ``function_call_output``
items matched by ``call_id``); function ``tools``; ``tool_choice``; ``parallel_tool_calls``;
``max_output_tokens``; ``temperature``; ``top_p``; ``user``; ``stream``; ``text.format`` only as plain
``text`` — and the ``response`` object (``status``/``incomplete_details``, function-call items, usage
with ``input_tokens_details.cached_tokens``). Responses has no stop sequences: a request that sets them
is refused for this adapter. Requests Relay sends here set ``store: false`` (the caller cannot refer
back to a stored response through another shape) and ``strict: false`` on tools that do not say (the
other shapes' default; Responses would otherwise enforce strict schemas).

What it deliberately does not know: other shapes, streams (``relay.adapters.responses_sse``).

Invariants: as ``relay.adapters.chat_ir``.
"""

from __future__ import annotations

import time
from typing import Any, Final

from . import ir
from .chat_ir import append, openai_common
from .params import check_rest, invalid, obj, unsupported

ADAPTER: Final = "openai_responses"
MAPPED: Final = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "user",
        "stream",
        "text",
        "include",
    }
)
_ITEM_FIELDS: Final = frozenset(
    {"type", "role", "content", "id", "status", "call_id", "name", "arguments", "output"}
)


def _parts(content: Any, adapter: str) -> list[ir.Part]:
    if isinstance(content, str):
        return [ir.Text(content)] if content else []
    if not isinstance(content, list):
        raise invalid("input[].content must be a string or a list of parts")
    out: list[ir.Part] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            if part.get("annotations"):
                raise unsupported("input[].content[].annotations", adapter)
            out.append(ir.Text(part["text"]))
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            out.append(ir.Text(part["refusal"]))
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            if part.get("detail") not in (None, "auto") or part.get("file_id") is not None:
                raise unsupported("input[].content[].input_image.detail", adapter)
            out.append(ir.image_from_url(part["image_url"]))
        else:
            raise unsupported(f"input[].content[].{kind}", adapter)
    return out


def _input(items: Any, adapter: str) -> tuple[list[str], list[ir.Message]]:
    if isinstance(items, str):
        return [], [ir.Message("user", [ir.Text(items)])]
    if not isinstance(items, list) or not items:
        raise invalid("'input' must be a string or a non-empty list")
    system: list[str] = []
    turns: list[ir.Message] = []
    for item in items:
        if not isinstance(item, dict):
            raise invalid("input[] items must be objects")
        for name, value in item.items():
            if name not in _ITEM_FIELDS and value is not None:
                raise unsupported(f"input[].{name}", adapter)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            parts = _parts(item.get("content"), adapter)
            if role in ("system", "developer"):
                system.append("".join(p.text for p in parts if isinstance(p, ir.Text)))
            elif role in ("user", "assistant"):
                append(turns, role, parts)
            else:
                raise unsupported(f"input[].role={role}", adapter)
        elif kind == "function_call":
            args = item.get("arguments")
            call = ir.ToolCall(
                str(item.get("call_id", "")),
                str(item.get("name", "")),
                args if isinstance(args, str) else "{}",
            )
            append(turns, "assistant", [call])
        elif kind == "function_call_output":
            output = item.get("output")
            result = [p for p in _parts(output, adapter) if isinstance(p, ir.Text | ir.Image)]
            append(turns, "user", [ir.ToolResult(str(item.get("call_id", "")), result or [ir.Text("")])])
        else:
            raise unsupported(f"input[].{kind}", adapter)
    return system, turns


def request_from_responses(body: dict[str, Any], adapter: str) -> ir.Request:
    check_rest(body, MAPPED, adapter)
    text = body.get("text")
    if text is not None and text != {"format": {"type": "text"}}:
        raise unsupported("text", adapter)
    if body.get("include"):
        raise unsupported("include", adapter)
    system, turns = _input(body.get("input"), adapter)
    instructions = body.get("instructions")
    if isinstance(instructions, str):
        system.insert(0, instructions)
    tools = None
    if body.get("tools") is not None:
        if not isinstance(body["tools"], list):
            raise invalid("'tools' must be a list")
        tools = []
        for tool in body["tools"]:
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise unsupported("tools[].type", adapter)
            tools.append(
                ir.Tool(
                    str(tool.get("name", "")),
                    tool.get("description"),
                    tool.get("parameters"),
                    tool.get("strict"),
                )
            )
    raw_choice, choice, name = body.get("tool_choice"), None, None
    if isinstance(raw_choice, dict):
        if raw_choice.get("type") != "function" or not isinstance(raw_choice.get("name"), str):
            raise unsupported("tool_choice", adapter)
        choice, name = "tool", raw_choice["name"]
    elif raw_choice in (None, "auto", "none", "required"):
        choice = raw_choice
    else:
        raise unsupported("tool_choice", adapter)
    return ir.Request(
        model=body["model"],
        messages=turns,
        system=system,
        tools=tools,
        tool_choice=choice,
        tool_name=name,
        parallel_tool_calls=body.get("parallel_tool_calls"),
        max_tokens=body.get("max_output_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        user=body.get("user"),
        stream=body.get("stream") is True,
    )


def _content_part(part: ir.Part) -> dict[str, Any]:
    if isinstance(part, ir.Text):
        return {"type": "input_text", "text": part.text}
    if isinstance(part, ir.Image):
        return {"type": "input_image", "image_url": ir.image_url(part)}
    raise unsupported("tool call in a user turn", ADAPTER)


def _turn_items(turn: ir.Message, items: list[dict[str, Any]]) -> None:
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending:
            items.append({"type": "message", "role": "user", "content": list(pending)})
            pending.clear()

    for part in turn.parts:
        if turn.role == "assistant":
            if isinstance(part, ir.Text):
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": part.text}],
                    }
                )
            elif isinstance(part, ir.ToolCall):
                items.append(
                    {
                        "type": "function_call",
                        "call_id": part.id,
                        "name": part.name,
                        "arguments": part.arguments,
                    }
                )
            else:
                raise unsupported("assistant image or tool result", ADAPTER)
        elif isinstance(part, ir.ToolResult):
            flush()
            if part.is_error:
                raise unsupported("tool_result.is_error", ADAPTER)
            if all(isinstance(p, ir.Text) for p in part.content):
                output: Any = "".join(p.text for p in part.content if isinstance(p, ir.Text))
            else:
                output = [_content_part(p) for p in part.content]
            items.append({"type": "function_call_output", "call_id": part.call_id, "output": output})
        else:
            pending.append(_content_part(part))
    flush()


def request_to_responses(req: ir.Request) -> dict[str, Any]:
    if req.stop:
        raise unsupported(req.stop_param, ADAPTER)
    items: list[dict[str, Any]] = []
    for turn in req.messages:
        _turn_items(turn, items)
    out: dict[str, Any] = {"model": req.model, "input": items}
    if req.system:
        out["instructions"] = "\n\n".join(req.system)
    if req.tools is not None:
        tools = []
        for tool in req.tools:
            spec: dict[str, Any] = {"type": "function", "name": tool.name}
            if tool.description is not None:
                spec["description"] = tool.description
            spec["parameters"] = (
                tool.parameters if tool.parameters is not None else {"type": "object", "properties": {}}
            )
            spec["strict"] = bool(tool.strict)
            tools.append(spec)
        out["tools"] = tools
    if req.tool_choice == "tool":
        out["tool_choice"] = {"type": "function", "name": req.tool_name}
    elif req.tool_choice is not None:
        out["tool_choice"] = req.tool_choice
    if req.parallel_tool_calls is False:
        out["parallel_tool_calls"] = False
    openai_common(req, out, "max_output_tokens")
    out["store"] = False
    return out


def responses_usage(usage: Any) -> ir.Usage:
    if not isinstance(usage, dict):
        return ir.Usage()
    details = obj(usage.get("input_tokens_details"))

    def n(value: Any) -> int:
        return value if type(value) is int and value >= 0 else 0

    return ir.Usage(
        n(usage.get("input_tokens")),
        n(usage.get("output_tokens")),
        n(details.get("cached_tokens")),
        n(details.get("cache_write_tokens")),
    )


def stop_from_status(response: dict[str, Any], called_tool: bool) -> str:
    if response.get("status") == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return ir.CONTENT_FILTER if reason == "content_filter" else ir.MAX_TOKENS
    return ir.TOOL_USE if called_tool else ir.END_TURN


def response_from_responses(body: dict[str, Any]) -> ir.Response:
    content: list[ir.Text | ir.ToolCall] = []
    refused = False
    for item in body.get("output") or []:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "message":
            for part in item.get("content") or []:
                if (
                    isinstance(part, dict)
                    and part.get("type") == "output_text"
                    and isinstance(part.get("text"), str)
                ):
                    content.append(ir.Text(part["text"]))
                elif isinstance(part, dict) and part.get("type") == "refusal":
                    content.append(ir.Text(str(part.get("refusal", ""))))
                    refused = True
        elif kind == "function_call":
            args = item.get("arguments")
            content.append(
                ir.ToolCall(
                    str(item.get("call_id", "")),
                    str(item.get("name", "")),
                    args if isinstance(args, str) else "{}",
                )
            )
    stop = stop_from_status(body, any(isinstance(p, ir.ToolCall) for p in content))
    created = body.get("created_at")
    return ir.Response(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=content,
        stop=ir.REFUSAL if refused else stop,
        usage=responses_usage(body.get("usage")),
        created=created if type(created) is int else None,
    )


def usage_to_responses(usage: ir.Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def call_item(call: ir.ToolCall, status: str = "completed") -> dict[str, Any]:
    return {
        "id": "fc_" + call.id,
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if status == "completed" else "",
        "status": status,
    }


def envelope(resp_id: str, model: str, created: int | None, status: str = "in_progress") -> dict[str, Any]:
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created if created is not None else int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "model": model,
        "output": [],
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": None,
    }


def finished(env: dict[str, Any], output: list[dict[str, Any]], stop: str, usage: ir.Usage) -> dict[str, Any]:
    incomplete = stop in (ir.MAX_TOKENS, ir.CONTENT_FILTER)
    reason = "max_output_tokens" if stop == ir.MAX_TOKENS else "content_filter"
    return {
        **env,
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": reason} if incomplete else None,
        "output": output,
        "usage": usage_to_responses(usage),
    }


def response_to_responses(resp: ir.Response, model: str) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    for index, part in enumerate(resp.content):
        if isinstance(part, ir.Text):
            output.append(message_item(f"msg_{index}_{resp.id}", part.text))
        else:
            output.append(call_item(part))
    return finished(envelope(resp.id, model, resp.created), output, resp.stop, resp.usage)
