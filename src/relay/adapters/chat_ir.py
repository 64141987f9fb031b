"""OpenAI Chat Completions ↔ the internal representation (SPEC §7.3): requests and whole responses.

What it knows: the chat request fields translation maps — ``messages`` (``system``/``developer`` text,
``user`` text and ``image_url`` parts, ``assistant`` text and ``tool_calls``, ``tool`` results by
``tool_call_id``), ``tools[].function``, ``tool_choice``, ``parallel_tool_calls``, ``max_tokens`` /
``max_completion_tokens`` (Relay sends ``max_completion_tokens``), ``temperature``, ``top_p``, ``stop``,
``user``, ``stream`` and ``stream_options.include_usage`` — and the ``chat.completion`` object
(``finish_reason`` ``stop``/``length``/``tool_calls``/``content_filter``; ``usage`` with
``prompt_tokens_details.cached_tokens``).

What it deliberately does not know: other shapes (they meet only in ``relay.adapters.ir``), streams
(``relay.adapters.chat_sse``), transport.

Invariants: consecutive turns of one role merge into one IR message (the normal form every reader
produces); a field without a counterpart raises ``unsupported_parameter`` (``relay.adapters.params``).
"""

from __future__ import annotations

import time
from typing import Any, Final

from . import ir
from .params import check_rest, invalid, obj, present, unsupported

MAPPED: Final = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "user",
        "stream",
        "stream_options",
    }
)
_MESSAGE_FIELDS: Final = frozenset(
    {"role", "content", "tool_calls", "tool_call_id", "refusal", "annotations"}
)
"""``annotations`` (citations an earlier answer carried, sent back as part of the history) are dropped."""
FINISH_TO_STOP: Final = {
    "stop": ir.END_TURN,
    "length": ir.MAX_TOKENS,
    "tool_calls": ir.TOOL_USE,
    "function_call": ir.TOOL_USE,
    "content_filter": ir.CONTENT_FILTER,
}
STOP_TO_FINISH: Final = {
    ir.END_TURN: "stop",
    ir.STOP_SEQUENCE: "stop",
    ir.MAX_TOKENS: "length",
    ir.TOOL_USE: "tool_calls",
    ir.CONTENT_FILTER: "content_filter",
    ir.REFUSAL: "content_filter",
}


def append(turns: list[ir.Message], role: str, parts: list[ir.Part]) -> None:
    """Add a turn, merging it into the previous one of the same role (the IR's normal form)."""
    if not parts:
        return
    if turns and turns[-1].role == role:
        turns[-1].parts.extend(parts)
    else:
        turns.append(ir.Message(role, parts))


def _texts(content: Any, where: str, adapter: str, *, images: bool) -> list[ir.Text | ir.Image]:
    if content is None:
        return []
    if isinstance(content, str):
        return [ir.Text(content)] if content else []
    if not isinstance(content, list):
        raise invalid(f"{where}.content must be a string or a list of parts")
    out: list[ir.Text | ir.Image] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            out.append(ir.Text(part["text"]))
        elif kind == "image_url" and images:
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            if not isinstance(url, str):
                raise invalid(f"{where}.content[].image_url.url must be a string")
            if image.get("detail") not in (None, "auto"):
                raise unsupported(f"{where}.content[].image_url.detail", adapter)
            out.append(ir.image_from_url(url))
        elif kind == "refusal" and not images and isinstance(part.get("refusal"), str):
            out.append(ir.Text(part["refusal"]))
        else:
            raise unsupported(f"{where}.content[].{kind}", adapter)
    return out


def _plain_text(content: Any, where: str, adapter: str) -> str:
    return "".join(p.text for p in _texts(content, where, adapter, images=False) if isinstance(p, ir.Text))


def _tool_calls(calls: Any, adapter: str) -> list[ir.Part]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise invalid("messages[].tool_calls must be a list")
    out: list[ir.Part] = []
    for call in calls:
        if not isinstance(call, dict) or call.get("type", "function") != "function":
            raise unsupported("messages[].tool_calls[].type", adapter)
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise invalid("messages[].tool_calls[].function.name must be a string")
        arguments = fn.get("arguments")
        out.append(
            ir.ToolCall(
                str(call.get("id", "")), fn["name"], arguments if isinstance(arguments, str) else "{}"
            )
        )
    return out


def _messages(messages: Any, adapter: str) -> tuple[list[str], list[ir.Message]]:
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list")
    system: list[str] = []
    turns: list[ir.Message] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid(f"messages[{index}] must be an object")
        if not message.keys() <= _MESSAGE_FIELDS:  # one set comparison for the usual message
            for name, value in message.items():
                if name not in _MESSAGE_FIELDS and value is not None:
                    raise unsupported(f"messages[].{name}", adapter)
        role, content = message.get("role"), message.get("content")
        if role in ("system", "developer"):
            system.append(_plain_text(content, "messages[]", adapter))
        elif role == "user":
            append(turns, "user", list(_texts(content, "messages[]", adapter, images=True)))
        elif role == "assistant":
            parts: list[ir.Part] = list(_texts(content, "messages[]", adapter, images=False))
            if isinstance(message.get("refusal"), str) and message["refusal"]:
                parts.append(ir.Text(message["refusal"]))
            append(turns, "assistant", parts + _tool_calls(message.get("tool_calls"), adapter))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise invalid(f"messages[{index}].tool_call_id must be a string")
            result = _texts(content, "messages[]", adapter, images=False)
            append(turns, "user", [ir.ToolResult(call_id, result or [ir.Text("")])])
        else:
            raise unsupported(f"messages[].role={role}", adapter)
    return system, turns


def _tools(tools: Any, adapter: str) -> list[ir.Tool] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise invalid("'tools' must be a list")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise unsupported("tools[].type", adapter)
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise invalid("tools[].function.name must be a string")
        out.append(ir.Tool(fn["name"], fn.get("description"), fn.get("parameters"), fn.get("strict")))
    return out


def _tool_choice(choice: Any, adapter: str) -> tuple[str | None, str | None]:
    if choice is None or choice in ("auto", "none", "required"):
        return choice, None
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return "tool", fn["name"]
    raise unsupported("tool_choice", adapter)


def request_from_chat(body: dict[str, Any], adapter: str) -> ir.Request:
    """The IR of a chat request to be sent to ``adapter``; refuses what ``adapter`` cannot carry."""
    check_rest(body, MAPPED, adapter)
    system, turns = _messages(body.get("messages"), adapter)
    choice, name = _tool_choice(body.get("tool_choice"), adapter)
    stop = body.get("stop")
    options = body.get("stream_options")
    limit = body.get("max_completion_tokens")
    return ir.Request(
        model=body["model"],
        messages=turns,
        system=system,
        tools=_tools(body.get("tools"), adapter),
        tool_choice=choice,
        tool_name=name,
        parallel_tool_calls=body.get("parallel_tool_calls"),
        max_tokens=limit if limit is not None else body.get("max_tokens"),
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        stop=[stop] if isinstance(stop, str) else stop,
        user=body.get("user"),
        stream=body.get("stream") is True,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
    )


def _user_turns(parts: list[ir.Part], out: list[dict[str, Any]]) -> None:
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending:
            only_text = len(pending) == 1 and pending[0]["type"] == "text"
            out.append({"role": "user", "content": pending[0]["text"] if only_text else list(pending)})
            pending.clear()

    for part in parts:
        if isinstance(part, ir.ToolResult):
            flush()
            if part.is_error:
                raise unsupported("tool_result.is_error", "openai")
            if any(isinstance(p, ir.Image) for p in part.content):
                raise unsupported("tool_result.content[].image", "openai")
            text = "".join(p.text for p in part.content if isinstance(p, ir.Text))
            out.append({"role": "tool", "tool_call_id": part.call_id, "content": text})
        elif isinstance(part, ir.Text):
            pending.append({"type": "text", "text": part.text})
        elif isinstance(part, ir.Image):
            pending.append({"type": "image_url", "image_url": {"url": ir.image_url(part)}})
    flush()


def _assistant_turn(parts: list[ir.Part]) -> dict[str, Any]:
    text = "".join(p.text for p in parts if isinstance(p, ir.Text))
    calls = [
        {"id": p.id, "type": "function", "function": {"name": p.name, "arguments": p.arguments}}
        for p in parts
        if isinstance(p, ir.ToolCall)
    ]
    if any(isinstance(p, ir.Image | ir.ToolResult) for p in parts):
        raise unsupported("assistant image or tool result", "openai")
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def request_to_chat(req: ir.Request) -> dict[str, Any]:
    """The chat request for ``req`` (a stream always asks for the usage chunk: Relay meters it)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": text} for text in req.system]
    for turn in req.messages:
        if turn.role == "user":
            _user_turns(turn.parts, messages)
        else:
            messages.append(_assistant_turn(turn.parts))
    out: dict[str, Any] = {"model": req.model, "messages": messages}
    if req.tools is not None:
        functions = []
        for tool in req.tools:
            fn = {
                "name": tool.name,
                **present(description=tool.description, parameters=tool.parameters, strict=tool.strict),
            }
            functions.append({"type": "function", "function": fn})
        out["tools"] = functions
    if req.tool_choice == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": req.tool_name}}
    elif req.tool_choice is not None:
        out["tool_choice"] = req.tool_choice
    if req.parallel_tool_calls is False:
        out["parallel_tool_calls"] = False
    openai_common(req, out, "max_completion_tokens")
    if req.stop is not None:
        out["stop"] = req.stop
    if req.stream:
        out["stream_options"] = {"include_usage": True}
    return out


def openai_common(req: ir.Request, out: dict[str, Any], limit_field: str) -> None:
    """The fields chat and Responses spell alike (the token limit under ``limit_field``)."""
    out.update(
        present(**{limit_field: req.max_tokens}, temperature=req.temperature, top_p=req.top_p, user=req.user)
    )
    if req.stream:
        out["stream"] = True


def chat_usage(usage: Any) -> ir.Usage:
    if not isinstance(usage, dict):
        return ir.Usage()
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else 0
    return ir.Usage(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")), _int(cached), 0)


def _int(value: Any) -> int:
    return value if type(value) is int and value >= 0 else 0


def response_from_chat(body: dict[str, Any]) -> ir.Response:
    choices = body.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = obj(choice.get("message"))
    content: list[ir.Text | ir.ToolCall] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append(ir.Text(text))
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        content.append(ir.Text(refusal))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            args = fn.get("arguments")
            content.append(
                ir.ToolCall(
                    str(call.get("id", "")), str(fn.get("name", "")), args if isinstance(args, str) else "{}"
                )
            )
    stop = FINISH_TO_STOP.get(str(choice.get("finish_reason")), ir.END_TURN)
    if isinstance(refusal, str) and refusal:
        stop = ir.REFUSAL
    created = body.get("created")
    return ir.Response(
        id=str(body.get("id", "")),
        model=str(body.get("model", "")),
        content=content,
        stop=stop,
        usage=chat_usage(body.get("usage")),
        created=created if type(created) is int else None,
    )


def usage_to_chat(usage: ir.Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
    }


def tool_call_json(call: ir.ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def response_to_chat(resp: ir.Response, model: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in resp.content:
        if isinstance(part, ir.Text):
            texts.append(part.text)
        else:
            calls.append(tool_call_json(part))
    text = texts[0] if len(texts) == 1 else "".join(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": resp.id,
        "object": "chat.completion",
        "created": resp.created if resp.created is not None else int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": STOP_TO_FINISH.get(resp.stop, "stop"),
            }
        ],
        "usage": usage_to_chat(resp.usage),
    }
