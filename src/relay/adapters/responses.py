"""OpenAI Responses API: where its usage lives, in a response and in its event stream.

What it knows: usage is ``{input_tokens, output_tokens, input_tokens_details.cached_tokens}`` (input
already includes the cached tokens); a stream carries it only in its terminal event —
``response.completed``, ``response.incomplete`` or ``response.failed`` — under ``response.usage``
(earlier events such as ``response.created`` have ``"usage": null``).

What it deliberately does not know: transport, framing, other shapes, the rest of the response schema.

Invariants: never raises on a malformed upstream body; missing usage reads as zeros.
"""

from __future__ import annotations

from typing import Any

from .base import Usage, count, detail


def responses_usage(usage: Any) -> Usage:
    """``Usage`` from a Responses ``usage`` object."""
    if not isinstance(usage, dict):
        return Usage()
    details = usage.get("input_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    reasoning = detail(usage.get("output_tokens_details"), "reasoning_tokens")
    return Usage(count(usage.get("input_tokens")), count(usage.get("output_tokens")), cached, reasoning)


class ResponsesStreamUsage:
    """Collects usage from Responses events: the ``response.usage`` of the terminal event, which also
    names the model and the response's status (for a trace's attempt span)."""

    __slots__ = ("finish_reasons", "model", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        self.model: str | None = None
        self.finish_reasons: list[str] = []

    def take(self, event: dict[str, Any]) -> None:
        response = event.get("response")
        if isinstance(response, dict) and isinstance(response.get("usage"), dict):
            self.usage = responses_usage(response["usage"])
            model, status = response.get("model"), response.get("status")
            if type(model) is str:
                self.model = model
            if type(status) is str:
                self.finish_reasons = [status]
