"""Token usage of a complete (non-streamed) response, for every shape.

What it knows: which reader of ``relay.adapters.<shape>`` applies to which shape, and that large bodies
(embeddings of many long vectors) keep ``usage`` near their end, so it is read from a slice instead of
parsing megabytes (``json_codec.usage_object``; a full parse is the fallback).

What it deliberately does not know: pricing, usage events, streams (``relay.adapters.stream``).

Invariants: ``usage_from_response`` never raises on any body — missing, malformed or non-JSON usage is
``Usage()`` (zeros); an unknown shape is a programming error (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .anthropic import anthropic_usage
from .base import ANTHROPIC, CANONICAL, EMBEDDINGS, OPENAI, OPENAI_RESPONSES, Usage, count
from .json_codec import LARGE_BODY, loads, usage_object
from .openai import chat_usage, embeddings_usage
from .responses import responses_usage


def canonical_usage(usage: Any) -> Usage:
    """``Usage`` from Relay's canonical ``{input_tokens, output_tokens}``."""
    if not isinstance(usage, dict):
        return Usage()
    return Usage(count(usage.get("input_tokens")), count(usage.get("output_tokens")))


USAGE_READERS: Final[dict[str, Callable[[Any], Usage]]] = {
    OPENAI: chat_usage,
    OPENAI_RESPONSES: responses_usage,
    ANTHROPIC: anthropic_usage,
    EMBEDDINGS: embeddings_usage,
    CANONICAL: canonical_usage,
}
"""Per shape: ``Usage`` from that shape's ``usage`` object."""

_KEY_FIELD: Final = {
    OPENAI: "prompt_tokens",
    EMBEDDINGS: "prompt_tokens",
    OPENAI_RESPONSES: "input_tokens",
    ANTHROPIC: "input_tokens",
    CANONICAL: "input_tokens",
}


def usage_from_response(shape: str, body: bytes | dict[str, Any]) -> Usage:
    """The usage a response of ``shape`` reports (raw bytes or the already parsed object)."""
    reader = USAGE_READERS.get(shape)
    if reader is None:
        raise ValueError(f"unknown shape {shape!r}")
    if isinstance(body, dict):
        return reader(body.get("usage"))
    if len(body) > LARGE_BODY:
        found = usage_object(body, _KEY_FIELD[shape])
        if found is not None:
            return reader(found)
    try:
        parsed = loads(body)
    except ValueError:
        return Usage()
    return reader(parsed.get("usage")) if isinstance(parsed, dict) else Usage()
