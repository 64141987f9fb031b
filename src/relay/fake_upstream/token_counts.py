"""The deterministic "model": what the fake replies and how many tokens it bills.

Tests of the gateway (usage events, budgets, translation) need exact numbers they can predict, so a token
is simply a whitespace-separated word:

* input tokens = words in every text the request carries (all messages of every role, text content
  parts, ``system``, ``instructions``, ``input``), at least 1;
* the reply is ``"Echo: "`` followed by the words of the last user message (single-spaced), cut to
  ``min(DEFAULT_MAX_WORDS, max tokens of the request)`` words; output tokens = words in the reply;
* beyond echoing (``relay.fake_upstream.scenario``): a tool call when the request offers tools and asks
  for one, an echo of the tool result after one, a stop at the request's stop sequence, cached input
  tokens, hidden reasoning tokens (added to the output tokens) and a mid-stream error when the request's
  text says ``fake:cached=N`` / ``fake:reasoning=N`` / ``fake:stream_error``.

Everything here is pure so tests can import it and compute expected values.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from .scenario import Scan, directives, stop_at, tool_to_call

Api = Literal["chat", "responses", "messages", "embeddings"]

DEFAULT_MAX_WORDS = 64
"""Length cap of a reply when the request sets no max tokens (it then ends with a normal stop)."""

_MAX_TOKEN_FIELDS: dict[str, tuple[str, ...]] = {
    "chat": ("max_completion_tokens", "max_tokens"),
    "responses": ("max_output_tokens",),
    "messages": ("max_tokens",),
    "embeddings": (),
}


@dataclass(frozen=True, slots=True)
class Completion:
    """What the fake model answers; ``truncated`` means the request's max tokens cut the reply."""

    text: str
    input_tokens: int
    output_tokens: int
    truncated: bool
    tool_name: str | None = None  # the fake model calls this tool (``text`` is then empty)
    tool_arguments: str = ""  # JSON text of the call's input
    stop_sequence: str | None = None  # the request's stop sequence that ended the reply
    cached_tokens: int = 0  # of ``input_tokens``, read from the (fake) prompt cache
    stream_error: bool = False  # a stream ends with the API's error event instead of its finish
    reasoning_tokens: int = 0  # of ``output_tokens``, spent reasoning (not in ``text``)


def count_words(text: str) -> int:
    return len(text.split())


def content_text(content: Any) -> str:
    """Text of a message ``content``: a string, or the ``text`` of each part of a list, space-joined.

    Joining with a space never merges two words, so counting words of the result equals counting them
    part by part.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
                elif part.get("type") == "tool_result":  # Anthropic: the result's own content
                    texts.append(content_text(part.get("content")))
        return " ".join(texts)
    return ""


def _scan(api: Api, body: dict[str, Any]) -> Scan:
    """One pass over the request: input tokens, the last turn's text (a user message or a tool
    result), whether that last turn was a tool result, and every text (for the directives)."""
    if api == "embeddings":
        value = body.get("input")
        return Scan(max(1, count_words(content_text(value)) + _token_arrays(value)), "", False, "")
    texts: list[str] = []
    last_user = ""
    after_tool = False
    if api == "messages":
        texts.append(content_text(body.get("system")))
        items = body.get("messages")
    elif api == "responses":
        texts.append(content_text(body.get("instructions")))
        items = body.get("input")
        if isinstance(items, str):
            texts.append(items)
            last_user = items
    else:
        items = body.get("messages")
    if isinstance(items, list):
        for item in items:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call_output":  # Responses tool result
                text = content_text(item.get("output"))
                texts.append(text)
                last_user, after_tool = text, True
                continue
            text = content_text(item.get("content"))
            texts.append(text)
            role = item.get("role")
            if role == "tool":
                last_user, after_tool = text, True
            elif role == "user":
                content = item.get("content")
                tool_result = isinstance(content, list) and any(
                    isinstance(p, dict) and p.get("type") == "tool_result" for p in content
                )
                last_user, after_tool = text, tool_result
            elif role == "assistant" or item.get("type") == "function_call":
                after_tool = False
    joined = " ".join(texts)
    return Scan(max(1, count_words(joined)), last_user, after_tool, joined)


def _token_arrays(value: Any) -> int:
    """Embeddings input may be pre-tokenized (a list of ints, or a list of such lists)."""
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return len(value)
    if isinstance(value, list):
        return sum(len(v) for v in value if isinstance(v, list))
    return 0


def input_tokens(api: Api, body: dict[str, Any]) -> int:
    """Documented count of input tokens of a request body (see module docstring)."""
    return _scan(api, body).input_tokens


def max_output_words(api: Api, body: dict[str, Any]) -> int | None:
    for name in _MAX_TOKEN_FIELDS[api]:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(1, value)
    return None


def complete(api: Api, body: dict[str, Any]) -> Completion:
    """The reply and usage the fake returns for ``body`` on the given API."""
    scan = _scan(api, body)
    asked = directives(scan.all_text, scan.input_tokens)
    c = _reply(api, body, scan, asked.cached, asked.stream_error)
    if asked.reasoning:
        return replace(c, output_tokens=c.output_tokens + asked.reasoning, reasoning_tokens=asked.reasoning)
    return c


def _reply(api: Api, body: dict[str, Any], scan: Scan, cached: int, stream_error: bool) -> Completion:
    tokens_in, user_text = scan.input_tokens, scan.last_text
    tool = None if scan.after_tool or api == "embeddings" else tool_to_call(api, body, user_text)
    if tool is not None:
        name, arguments = tool
        return Completion(
            "", tokens_in, count_words(user_text) + 1, False, name, arguments, None, cached, stream_error
        )
    words = ["Echo:", *user_text.split()]
    budget = DEFAULT_MAX_WORDS
    cap = max_output_words(api, body)
    truncated = False
    if cap is not None and cap < budget:
        budget = cap
        truncated = len(words) > cap
    if len(words) > budget:
        words = words[:budget]
    text = " ".join(words)
    cut = stop_at(api, body, text)
    if cut is not None:
        text, sequence = cut
        return Completion(text, tokens_in, count_words(text), False, None, "", sequence, cached, stream_error)
    return Completion(text, tokens_in, len(words), truncated, None, "", None, cached, stream_error)


def split_deltas(text: str, max_parts: int = 8) -> list[str]:
    """Splits a reply into stream deltas (word by word, at most ``max_parts``); joined they give ``text``.

    Each delta after the first carries its leading space, as real tokenizers do.
    """
    words = text.split(" ")
    if len(words) <= 1:
        return [text]
    pieces = [words[0]] + [" " + word for word in words[1:]]
    if len(pieces) <= max_parts:
        return pieces
    size = -(-len(pieces) // max_parts)
    return ["".join(pieces[i : i + size]) for i in range(0, len(pieces), size)]
