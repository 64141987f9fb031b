"""Anthropic Messages ↔ the internal representation (SPEC §7.3): requests and whole responses.

What it knows: the Messages request fields translation maps — ``system`` (a string or text blocks),
``messages`` with ``text``, ``image`` (``base64`` or ``url`` source), ``tool_use`` and ``tool_result``
blocks, ``tools[] {name, description, input_schema}``, ``tool_choice`` (``auto``/``any``/``none``/
``tool``, ``disable_parallel_tool_use``), ``max_tokens`` (required upstream: the caller's, else
``RELAY_TRANSLATE_DEFAULT_MAX_TOKENS``), ``temperature``, ``top_p``, ``stop_sequences``,
``metadata.user_id``, ``stream`` — and the ``message`` object (``stop_reason``, ``stop_sequence``, usage
whose ``input_tokens`` excludes the cache: IR input = input + cache reads + cache writes).
``cache_control`` marks are dropped (a caching hint that never changes the answer).

What it deliberately does not know: other shapes, streams (``relay.adapters.anthropic_sse``).

Invariants: as ``relay.adapters.chat_ir`` (merged turns, refusal of what has no counterpart).
"""

from __future__ import annotations

from typing import Any, Final

from . import ir
from .chat_ir import append
from .json_codec import dumps, loads
from .params import check_rest, invalid, obj, unsupported

MAPPED: Final = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "tools",
        "tool_choice",
        "metadata",
    }
)
_STOPS: Final = frozenset({ir.END_TURN, ir.MAX_TOKENS, ir.STOP_SEQUENCE, ir.TOOL_USE, ir.REFUSAL})
_BLOCK_HINTS: Final = frozenset({"type", "cache_control"})


def _input_json(block: dict[str, Any]) -> str:
    return dumps(block.get("input", {})).decode()


def stop_from_anthropic(reason: Any) -> str:
    return reason if reason in _STOPS else ir.END_TURN


def stop_to_anthropic(stop: str) -> str:
    return ir.REFUSAL if stop == ir.CONTENT_FILTER else stop


def _check_block(block: dict[str, Any], allowed: frozenset[str], adapter: str) -> None:
    for name, value in block.items():
        if name not in allowed and name not in _BLOCK_HINTS and value is not None:
            raise unsupported(f"messages[].content[].{block.get('type')}.{name}", adapter)


def _image(block: dict[str, Any], adapter: str) -> ir.Image:
    _check_block(block, frozenset({"source"}), adapter)
    source = obj(block.get("source"))
    kind = source.get("type")
    if kind == "base64":
        return ir.Image(media_type=source.get("media_type"), data=source.get("data"))
    if kind == "url" and isinstance(source.get("url"), str):
        return ir.Image(url=source["url"])
    raise unsupported(f"messages[].content[].image.source.{kind}", adapter)


def _blocks(content: Any, adapter: str, *, nested: bool = False) -> list[ir.Part]:
    if isinstance(content, str):
        return [ir.Text(content)] if content else []
    if not isinstance(content, list):
        raise invalid("messages[].content must be a string or a list of blocks")
    out: list[ir.Part] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            _check_block(block, frozenset({"text"}), adapter)
            out.append(ir.Text(block["text"]))
        elif kind == "image":
            out.append(_image(block, adapter))
        elif kind == "tool_use" and not nested:
            _check_block(block, frozenset({"id", "name", "input"}), adapter)
            out.append(
                ir.ToolCall(
                    str(block.get("id", "")),
                    str(block.get("name", "")),
                    dumps(block.get("input", {})).decode(),
                )
            )
        elif kind == "tool_result" and not nested:
            _check_block(block, frozenset({"tool_use_id", "content", "is_error"}), adapter)
            inner = [p for p in _blocks(block.get("content", ""), adapter, nested=True)]
            result = [p for p in inner if isinstance(p, ir.Text | ir.Image)] or [ir.Text("")]
            out.append(
                ir.ToolResult(str(block.get("tool_use_id", "")), result, block.get("is_error") is True)
            )
        else:
            raise unsupported(f"messages[].content[].{kind}", adapter)
    return out


def _system(system: Any, adapter: str) -> list[str]:
    if system is None:
        return []
    if isinstance(system, str):
        return [system]
    texts = _blocks(system, adapter, nested=True)
    if not all(isinstance(p, ir.Text) for p in texts):
        raise unsupported("system[].image", adapter)
    return [p.text for p in texts if isinstance(p, ir.Text)]


def request_from_anthropic(body: dict[str, Any], adapter: str) -> ir.Request:
    check_rest(body, MAPPED, adapter)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list")
    turns: list[ir.Message] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(f"messages[{index}].role must be 'user' or 'assistant'")
        append(turns, message["role"], _blocks(message.get("content"), adapter))
    tools = None
    if body.get("tools") is not None:
        if not isinstance(body["tools"], list):
            raise invalid("'tools' must be a list")
        tools = []
        for tool in body["tools"]:
            if not isinstance(tool, dict) or tool.get("type") not in (None, "custom"):
                raise unsupported("tools[].type", adapter)
            for name in tool:
                if name not in ("name", "description", "input_schema", "type", "cache_control"):
                    raise unsupported(f"tools[].{name}", adapter)
            tools.append(
                ir.Tool(str(tool.get("name", "")), tool.get("description"), tool.get("input_schema"))
            )
    choice, name, parallel = None, None, None
    tc = body.get("tool_choice")
    if tc is not None:
        kind = tc.get("type") if isinstance(tc, dict) else None
        if kind not in ("auto", "any", "none", "tool"):
            raise unsupported("tool_choice", adapter)
        choice = {"any": "required", "tool": "tool"}.get(kind, kind)
        name = tc.get("name") if kind == "tool" else None
        if tc.get("disable_parallel_tool_use") is True:
            parallel = False
    metadata = body.get("metadata")
    user = None
    if isinstance(metadata, dict):
        for key, value in metadata.items():
            if key != "user_id" and value is not None:
                raise unsupported(f"metadata.{key}", adapter)
        user = metadata.get("user_id")
    return ir.Request(
        model=body["model"],
        messages=turns,
        system=_system(body.get("system"), adapter),
        tools=tools,
        tool_choice=choice,
        tool_name=name,
        parallel_tool_calls=parallel,
        max_tokens=body.get("max_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        stop=body.get("stop_sequences"),
        user=user,
        stream=body.get("stream") is True,
        stop_param="stop_sequences",
    )


def _image_block(image: ir.Image) -> dict[str, Any]:
    if image.url is not None:
        return {"type": "image", "source": {"type": "url", "url": image.url}}
    return {"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": image.data}}


def _arguments(call: ir.ToolCall) -> Any:
    try:
        value = loads(call.arguments) if call.arguments else {}
    except ValueError:
        raise invalid(f"the arguments of tool call {call.id!r} are not JSON") from None
    if not isinstance(value, dict):
        raise invalid(f"the arguments of tool call {call.id!r} are not a JSON object")
    return value


def _block(part: ir.Part) -> dict[str, Any]:
    if isinstance(part, ir.Text):
        return {"type": "text", "text": part.text}
    if isinstance(part, ir.Image):
        return _image_block(part)
    if isinstance(part, ir.ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": _arguments(part)}
    content = [_block(p) for p in part.content]
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": part.call_id, "content": content}
    if part.is_error:
        result["is_error"] = True
    return result


def request_to_anthropic(req: ir.Request, default_max_tokens: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in req.messages:
        parts = turn.parts
        if len(parts) == 1 and isinstance(parts[0], ir.Text):
            messages.append({"role": turn.role, "content": parts[0].text})
        else:
            messages.append({"role": turn.role, "content": [_block(p) for p in parts]})
    out: dict[str, Any] = {"model": req.model, "messages": messages}
    if len(req.system) == 1:
        out["system"] = req.system[0]
    elif req.system:
        out["system"] = [{"type": "text", "text": text} for text in req.system]
    out["max_tokens"] = req.max_tokens if req.max_tokens is not None else default_max_tokens
    if req.tools is not None:
        tools = []
        for tool in req.tools:
            if tool.strict:
                raise unsupported("tools[].strict", "anthropic")
            spec: dict[str, Any] = {"name": tool.name}
            if tool.description is not None:
                spec["description"] = tool.description
            spec["input_schema"] = tool.parameters if tool.parameters is not None else {"type": "object"}
            tools.append(spec)
        out["tools"] = tools
    choice: dict[str, Any] | None = None
    if req.tool_choice is not None:
        kind = {"required": "any"}.get(req.tool_choice, req.tool_choice)
        choice = {"type": kind, "name": req.tool_name} if kind == "tool" else {"type": kind}
    if req.parallel_tool_calls is False:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        out["tool_choice"] = choice
    if req.temperature is not None:
        out["temperature"] = req.temperature
    if req.top_p is not None:
        out["top_p"] = req.top_p
    if req.stop is not None:
        out["stop_sequences"] = req.stop
    if req.user is not None:
        out["metadata"] = {"user_id": req.user}
    if req.stream:
        out["stream"] = True
    return out


_NO_USAGE: Final = ir.Usage()  # the base of a usage read on its own (read only, never changed)


def _count(raw: dict[str, Any], name: str, default: int) -> int:
    value = raw.get(name)
    return value if type(value) is int and value >= 0 else default


def anthropic_usage(usage: Any, base: ir.Usage | None = None) -> ir.Usage:
    """IR usage from a Messages ``usage`` object; fields it lacks keep ``base``'s values (streams)."""
    raw = usage if isinstance(usage, dict) else {}
    prev = base or _NO_USAGE
    read = _count(raw, "cache_read_input_tokens", prev.cached_tokens)
    write = _count(raw, "cache_creation_input_tokens", prev.cache_write_tokens)
    plain = _count(raw, "input_tokens", prev.input_tokens - prev.cached_tokens - prev.cache_write_tokens)
    return ir.Usage(plain + read + write, _count(raw, "output_tokens", prev.output_tokens), read, write)


def usage_to_anthropic(usage: ir.Usage) -> dict[str, Any]:
    return {
        "input_tokens": max(0, usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens),
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
    }


def response_from_anthropic(body: dict[str, Any]) -> ir.Response:
    content: list[ir.Text | ir.ToolCall] = []
    for block in body.get("content") or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            content.append(ir.Text(block["text"]))
        elif kind == "tool_use":
            content.append(
                ir.ToolCall(
                    str(block.get("id", "")),
                    str(block.get("name", "")),
                    dumps(block.get("input", {})).decode(),
                )
            )
    sequence = body.get("stop_sequence")
    return ir.Response(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=content,
        stop=stop_from_anthropic(body.get("stop_reason")),
        stop_sequence=sequence if isinstance(sequence, str) else None,
        usage=anthropic_usage(body.get("usage")),
    )


def response_to_anthropic(resp: ir.Response, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for part in resp.content:
        if isinstance(part, ir.Text):
            content.append({"type": "text", "text": part.text})
        else:
            content.append({"type": "tool_use", "id": part.id, "name": part.name, "input": tool_input(part)})
    return {
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_to_anthropic(resp.stop),
        "stop_sequence": resp.stop_sequence if resp.stop == ir.STOP_SEQUENCE else None,
        "usage": usage_to_anthropic(resp.usage),
    }


def tool_input(call: ir.ToolCall) -> Any:
    """A response's tool input: the upstream's arguments as an object (``{}`` if they are not one)."""
    try:
        value = loads(call.arguments) if call.arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
