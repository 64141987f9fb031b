"""Relay's vocabulary for wire shapes: shape names, upstream paths, token usage and the adapter error.

What it knows: the five inbound shapes (``openai``, ``openai_responses``, ``anthropic``, ``embeddings``,
``canonical``), the three binding adapters, the upstream path each shape is sent to, and the value
objects every other adapter module returns (``Usage``, ``UpstreamRequest``, ``AdapterError``).

What it deliberately does not know: hosts, keys, HTTP clients, routing. Nothing here (or anywhere in
``relay.adapters``) does I/O or imports a module that does.

Invariants: ``Usage`` counts are non-negative ints (``count`` turns anything else into 0, so a malformed
upstream usage object never raises); ``input_tokens`` includes ``cached_input_tokens`` (OpenAI's
convention, which pricing relies on: uncached = input - cached), and ``output_tokens`` includes
``reasoning_tokens`` (priced as output; recorded apart for SPEC §14's Batch usage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from relay.errors import InvalidRequest

OPENAI: Final = "openai"
OPENAI_RESPONSES: Final = "openai_responses"
ANTHROPIC: Final = "anthropic"
EMBEDDINGS: Final = "embeddings"
CANONICAL: Final = "canonical"

INBOUND_SHAPES: Final = frozenset({OPENAI, OPENAI_RESPONSES, ANTHROPIC, EMBEDDINGS, CANONICAL})
"""Every shape a caller can speak to the inference plane (SPEC §7)."""

ADAPTERS: Final = frozenset({OPENAI, OPENAI_RESPONSES, ANTHROPIC})
"""Every value a binding's ``adapter`` may take (SPEC §2)."""

UPSTREAM_PATHS: Final[dict[str, str]] = {
    OPENAI: "/v1/chat/completions",
    OPENAI_RESPONSES: "/v1/responses",
    ANTHROPIC: "/v1/messages",
    EMBEDDINGS: "/v1/embeddings",
}
"""Upstream path per shape sent upstream (``embeddings`` goes to a binding whose adapter is ``openai``)."""

STREAMING_SHAPES: Final = frozenset({OPENAI, OPENAI_RESPONSES, ANTHROPIC})


def count(value: Any) -> int:
    """A token count from an upstream JSON value: a non-negative int, anything else (null, str, bool) → 0."""
    if type(value) is int and value >= 0:
        return value
    return 0


def detail(details: Any, name: str) -> int | None:
    """An optional count inside a usage ``…_details`` object: None when the upstream reports none
    (no such object or field, or not a non-negative int), so "not reported" stays apart from 0."""
    if not isinstance(details, dict):
        return None
    value = details.get(name)
    return value if type(value) is int and value >= 0 else None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one request consumed. ``input_tokens`` includes the ``cached_input_tokens`` among them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    # Of ``output_tokens``, those the upstream says went to reasoning (OpenAI chat and Responses);
    # None when it reports no such count (Anthropic, embeddings, servers without the field).
    reasoning_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """What to send upstream: a path under the host's ``base_url``, the complete header set, the body.

    ``strip_usage_chunk`` tells the stream filter (``StreamTap``) that Relay asked an OpenAI chat stream
    for usage the caller did not ask for, so the filter must hide it again.
    """

    path: str
    headers: dict[str, str]
    body: bytes
    strip_usage_chunk: bool = False


class AdapterError(InvalidRequest):
    """A request body the adapters refuse (HTTP 400) with a stable ``code``: ``invalid_json``,
    ``missing_model``, ``invalid_request``. Part of Relay's one error tree (``relay.errors``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)
