"""Relay's canonical shape (SPEC §7.2, ``POST /v1/generate``): validation and translation to and from
the three adapters, for whole requests and responses (streams: ``relay.adapters.canonical_stream``).

What it knows:
- Request ``{"model", "system"?, "messages": [{"role": "user"|"assistant", "content": str}],
  "max_tokens"?, "temperature"?, "stream"?}``. Relay owns this shape, so unlike pass-through shapes it
  is validated here (400 ``invalid_request`` naming the field); unknown fields are ignored, so clients
  written against a later version keep working.
- Mapping to upstream requests:
    openai            ``system`` → a leading ``system`` message; ``max_tokens`` → ``max_completion_tokens``
                      (what current OpenAI models accept; ``max_tokens`` is refused by reasoning models);
                      a stream also sets ``stream_options.include_usage`` (the usage feeds ``done``).
    anthropic         ``system`` → ``system``; ``max_tokens`` is required upstream, so a request without
                      one gets ``DEFAULT_ANTHROPIC_MAX_TOKENS`` (1024).
    openai_responses  ``system`` → ``instructions``; ``messages`` → ``input``; ``max_tokens`` →
                      ``max_output_tokens``; ``store: false`` (a canonical caller cannot refer back to
                      a stored response, so none is kept at the provider).
- Response ``{"id", "model", "content": str, "stop_reason", "usage": {"input_tokens", "output_tokens"}}``
  with ``stop_reason`` normalised to one vocabulary (Anthropic's, the richest): ``end_turn``,
  ``max_tokens``, ``stop_sequence``, ``tool_use``, ``content_filter``, ``refusal``, ``error``, or the
  upstream's own value when it has no equivalent. OpenAI's ``stop`` cannot tell a stop sequence from a
  natural end and maps to ``end_turn``.

What it deliberately does not know: general cross-shape translation (tools, images, multi-part content),
the upstream model name (``build_upstream_request`` rewrites ``model``), transport.

Invariants: translation reads only the fields above and never mutates its input; usage counts follow
``relay.adapters.base.Usage`` (Anthropic input includes cache reads and writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from .base import ADAPTERS, ANTHROPIC, OPENAI, AdapterError
from .json_codec import loads
from .usage import USAGE_READERS

DEFAULT_ANTHROPIC_MAX_TOKENS: Final = 1024
ROLES: Final = ("user", "assistant")

_CHAT_STOP: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
}
_INCOMPLETE_STOP: Final = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}


@dataclass(frozen=True, slots=True)
class CanonicalRequest:
    model: str
    messages: list[dict[str, str]]
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    stream: bool = False


def _invalid(message: str) -> AdapterError:
    return AdapterError("invalid_request", message)


def parse_canonical(body: dict[str, Any]) -> CanonicalRequest:
    """The validated canonical request; raises ``AdapterError`` (400 ``invalid_request``)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise AdapterError("missing_model", "request body has no 'model'")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("'messages' must be a non-empty list")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid(f"messages[{index}] must be an object")
        if message.get("role") not in ROLES:
            raise _invalid(f"messages[{index}].role must be 'user' or 'assistant'")
        if not isinstance(message.get("content"), str):
            raise _invalid(f"messages[{index}].content must be a string")
    system = body.get("system")
    if system is not None and not isinstance(system, str):
        raise _invalid("'system' must be a string")
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise _invalid("'max_tokens' must be a positive integer")
    temperature = body.get("temperature")
    if temperature is not None and (type(temperature) not in (int, float) or temperature < 0):
        raise _invalid("'temperature' must be a non-negative number")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid("'stream' must be a boolean")
    turns = [{"role": m["role"], "content": m["content"]} for m in messages]
    return CanonicalRequest(model, turns, system, max_tokens, temperature, stream)


def canonical_to(adapter: str, body: dict[str, Any]) -> dict[str, Any]:
    """The upstream request body for ``adapter`` equivalent to canonical request ``body``."""
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown adapter {adapter!r}")
    req = parse_canonical(body)
    out: dict[str, Any] = {"model": req.model}
    if adapter == OPENAI:
        system = [{"role": "system", "content": req.system}] if req.system is not None else []
        out["messages"] = system + req.messages
        if req.max_tokens is not None:
            out["max_completion_tokens"] = req.max_tokens
    elif adapter == ANTHROPIC:
        if req.system is not None:
            out["system"] = req.system
        out["messages"] = req.messages
        out["max_tokens"] = req.max_tokens if req.max_tokens is not None else DEFAULT_ANTHROPIC_MAX_TOKENS
    else:
        if req.system is not None:
            out["instructions"] = req.system
        out["input"] = req.messages
        if req.max_tokens is not None:
            out["max_output_tokens"] = req.max_tokens
        out["store"] = False
    if req.temperature is not None:
        out["temperature"] = req.temperature
    if req.stream:
        out["stream"] = True
        if adapter == OPENAI:
            out["stream_options"] = {"include_usage": True}
    return out


def chat_stop_reason(finish_reason: Any) -> str | None:
    if finish_reason is None:
        return None
    return _CHAT_STOP.get(finish_reason, str(finish_reason))


def responses_stop_reason(response: dict[str, Any]) -> str | None:
    status = response.get("status")
    if status == "completed":
        return "end_turn"
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return _INCOMPLETE_STOP.get(reason, str(reason)) if reason is not None else "incomplete"
    if status == "failed":
        return "error"
    return str(status) if status is not None else None


def _text_of(parts: Any, kind: str) -> str:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts = (p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == kind)
    return "".join(t for t in texts if isinstance(t, str))


def _content_and_stop(adapter: str, body: dict[str, Any]) -> tuple[str, str | None]:
    if adapter == OPENAI:
        choices = body.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        stop = chat_stop_reason(choice.get("finish_reason"))
        if isinstance(message.get("refusal"), str) and message["refusal"]:
            stop = "refusal"
        return _text_of(message.get("content"), "text"), stop
    if adapter == ANTHROPIC:
        stop = body.get("stop_reason")
        return _text_of(body.get("content"), "text"), str(stop) if stop is not None else None
    output = body.get("output")
    items = output if isinstance(output, list) else []
    messages = [i for i in items if isinstance(i, dict) and i.get("type") == "message"]
    text = "".join(_text_of(m.get("content"), "output_text") for m in messages)
    refused = any(_text_of(m.get("content"), "refusal") for m in messages)
    return text, "refusal" if refused else responses_stop_reason(body)


def canonical_from_response(
    adapter: str, body: dict[str, Any] | bytes, *, model: str | None = None
) -> dict[str, Any]:
    """The canonical response for an upstream ``adapter`` response. ``model`` (e.g. the name the caller
    used) replaces the upstream's ``model`` when given. A body that is not a JSON object raises
    ``ValueError`` (the caller answers 502: the upstream broke its contract)."""
    if adapter not in ADAPTERS:
        raise ValueError(f"unknown adapter {adapter!r}")
    parsed = loads(body) if isinstance(body, bytes) else body
    if not isinstance(parsed, dict):
        raise ValueError("upstream response is not a JSON object")
    content, stop_reason = _content_and_stop(adapter, parsed)
    usage = USAGE_READERS[adapter](parsed.get("usage"))
    return {
        "id": parsed.get("id"),
        "model": model if model is not None else parsed.get("model"),
        "content": content,
        "stop_reason": stop_reason,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
    }
