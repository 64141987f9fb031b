"""The deterministic "model": what the fake replies and how many tokens it bills.

Tests of the gateway (usage events, budgets, translation) need exact numbers they can predict, so a token
is simply a whitespace-separated word:

* input tokens = words in every text the request carries (all messages of every role, text content
  parts, ``system``, ``instructions``, ``input``), at least 1;
* the reply is ``"Echo: "`` followed by the words of the last user message (single-spaced), cut to
  ``min(DEFAULT_MAX_WORDS, max tokens of the request)`` words; output tokens = words in the reply.

Everything here is pure so tests can import it and compute expected values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

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
        return " ".join(texts)
    return ""


def _scan(api: Api, body: dict[str, Any]) -> tuple[int, str]:
    """One pass over the request: (input tokens, text of the last user message)."""
    if api == "embeddings":
        value = body.get("input")
        return max(1, count_words(content_text(value)) + _token_arrays(value)), ""
    texts: list[str] = []
    last_user = ""
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
            if isinstance(item, dict):
                text = content_text(item.get("content"))
                texts.append(text)
                if item.get("role") == "user":
                    last_user = text
    return max(1, count_words(" ".join(texts))), last_user


def _token_arrays(value: Any) -> int:
    """Embeddings input may be pre-tokenized (a list of ints, or a list of such lists)."""
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return len(value)
    if isinstance(value, list):
        return sum(len(v) for v in value if isinstance(v, list))
    return 0


def input_tokens(api: Api, body: dict[str, Any]) -> int:
    """Documented count of input tokens of a request body (see module docstring)."""
    return _scan(api, body)[0]


def last_user_text(api: Api, body: dict[str, Any]) -> str:
    return _scan(api, body)[1]


def max_output_words(api: Api, body: dict[str, Any]) -> int | None:
    for name in _MAX_TOKEN_FIELDS[api]:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(1, value)
    return None


def complete(api: Api, body: dict[str, Any]) -> Completion:
    """The reply and usage the fake returns for ``body`` on the given API."""
    tokens_in, user_text = _scan(api, body)
    words = ["Echo:", *user_text.split()]
    budget = DEFAULT_MAX_WORDS
    cap = max_output_words(api, body)
    truncated = False
    if cap is not None and cap < budget:
        budget = cap
        truncated = len(words) > cap
    if len(words) > budget:
        words = words[:budget]
    return Completion(" ".join(words), tokens_in, len(words), truncated)


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
