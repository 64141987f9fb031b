"""What a request asks the fake model for beyond an echo: a tool call, a stop sequence, cached input
tokens, a mid-stream error (documented in docs/fake-upstream.md, "Tool calls, stop sequences, cache").

The triggers live in the request's own meaning — its tools, ``tool_choice``, stop sequences and text —
never in headers or extra fields, so they survive Relay's cross-shape translation (SPEC §7.3) and tests
can drive every direction with one knob:

* **tool call**: the request offers tools, its ``tool_choice`` is not ``none``, the last turn is a user
  message (not a tool result), and either ``tool_choice`` names a tool, or the last user text contains a
  tool's name, or ``tool_choice`` is ``required`` / ``any`` (then the first tool). The call's input is
  ``{"text": <the last user text>}``.
* **stop sequence**: the reply is cut before the first of the request's ``stop`` (chat) /
  ``stop_sequences`` (messages) it contains.
* ``fake:cached=N`` in any text of the request → ``N`` of the input tokens are reported as cached
  (capped at the input count); ``fake:reasoning=N`` → the model "thought" ``N`` tokens it does not
  show: they are added to the output tokens and reported as reasoning tokens where the API has the
  field (chat, Responses; capped at ``MAX_REASONING``); ``fake:stream_error`` → a stream sends its
  content, then the API's error event instead of its finish; ``fake:drop_stream`` → the connection
  is dropped before the stream's last three events (the app's ``fail_after_chunks``, counted from
  the end).

Pure functions; nothing here does I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

_CACHED = re.compile(r"fake:cached=(\d+)")
_REASONING = re.compile(r"fake:reasoning=(\d+)")
MAX_REASONING = 1_000_000


@dataclass(frozen=True, slots=True)
class Scan:
    input_tokens: int
    last_text: str
    after_tool: bool  # the last turn is a tool result
    all_text: str


class Directives(NamedTuple):
    cached: int = 0  # input tokens read from the (fake) prompt cache
    reasoning: int = 0  # hidden output tokens spent reasoning
    stream_error: bool = False


NO_DIRECTIVES = Directives()


def directives(text: str, input_tokens: int) -> Directives:
    """What the request's text asks for beyond an echo (cached input, reasoning, a stream error)."""
    if "fake:" not in text:
        return NO_DIRECTIVES
    found = _CACHED.search(text)
    cached = min(int(found.group(1)), input_tokens) if found else 0
    thought = _REASONING.search(text)
    reasoning = min(int(thought.group(1)), MAX_REASONING) if thought else 0
    return Directives(cached, reasoning, "fake:stream_error" in text)


def _tool_names(api: str, tools: list[Any]) -> list[str]:
    names = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        spec = tool.get("function") if api == "chat" else tool
        name = spec.get("name") if isinstance(spec, dict) else None
        if isinstance(name, str) and name:
            names.append(name)
    return names


def _choice(api: str, choice: Any) -> tuple[str, str | None]:
    """``(mode, tool name)`` with mode ``auto``, ``none``, ``required`` or ``named``."""
    if api == "messages":
        kind = choice.get("type") if isinstance(choice, dict) else "auto"
        if kind == "tool":
            return "named", choice.get("name")
        return {"any": "required", "none": "none"}.get(str(kind), "auto"), None
    if isinstance(choice, dict):
        fn = choice.get("function") if api == "chat" else choice
        return "named", fn.get("name") if isinstance(fn, dict) else None
    return (choice, None) if choice in ("none", "required") else ("auto", None)


def tool_to_call(api: str, body: dict[str, Any], user_text: str) -> tuple[str, str] | None:
    """``(tool name, arguments JSON)`` when the fake model calls a tool for this request."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    names = _tool_names(api, tools)
    mode, named = _choice(api, body.get("tool_choice"))
    if mode == "none" or not names:
        return None
    if mode == "named" and isinstance(named, str):
        name: str | None = named
    else:
        name = next((n for n in names if n in user_text), None)
        if name is None and mode == "required":
            name = names[0]
    if name is None:
        return None
    return name, orjson.dumps({"text": user_text}).decode()


def stop_at(api: str, body: dict[str, Any], text: str) -> tuple[str, str] | None:
    """``(text before the sequence, the sequence)`` when one of the request's stop sequences occurs."""
    raw = body.get("stop") if api == "chat" else body.get("stop_sequences") if api == "messages" else None
    sequences = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    best: tuple[int, str] | None = None
    for sequence in sequences:
        if isinstance(sequence, str) and sequence:
            at = text.find(sequence)
            if at != -1 and (best is None or at < best[0]):
                best = (at, sequence)
    return (text[: best[0]], best[1]) if best is not None else None
