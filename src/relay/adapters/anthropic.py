"""Anthropic Messages: upstream headers, and how its usage maps onto Relay's ``Usage``.

What it knows:
- Headers: the upstream key goes in ``x-api-key``; ``anthropic-version`` is required upstream, so the
  caller's value is forwarded and ``2023-06-01`` (the version batch items use) is sent when it has none;
  ``anthropic-beta`` is forwarded when the caller sends it. Both change the wire contract the caller
  expects, which is why they — and only they — cross the gateway (see ``relay.adapters.request``).
- Usage mapping. Anthropic reports ``input_tokens`` *excluding* prompt-cache traffic, plus
  ``cache_read_input_tokens`` and ``cache_creation_input_tokens``. Relay's ``Usage`` follows OpenAI's
  convention (input includes cached), so:
  ``input_tokens = input_tokens + cache_read_input_tokens + cache_creation_input_tokens``,
  ``cached_input_tokens = cache_read_input_tokens``, ``output_tokens = output_tokens``.
  Pricing then bills cache reads at the binding's ``cached_input`` rate and cache writes at the plain
  input rate (Anthropic charges writes 1.25×–2× input; Relay's pricing has no field for that, so a
  cache write is priced like an ordinary input token — documented, slightly under-priced).
- Streams: ``message_start.message.usage`` carries input (and cache) counts and a provisional
  ``output_tokens``; ``message_delta.usage`` carries the cumulative final ``output_tokens`` (and, in
  newer API versions, may repeat the input counts). The latest value of each field wins.

What it deliberately does not know: transport, framing, other shapes.

Invariants: never raises on a malformed upstream body; missing usage reads as zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .base import Usage, count

DEFAULT_VERSION: Final = "2023-06-01"
_FIELDS: Final = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _header_safe(value: str) -> bool:
    return bool(value) and "\r" not in value and "\n" not in value


def upstream_headers(api_key: str, caller_headers: Mapping[str, str]) -> dict[str, str]:
    """``x-api-key``, ``anthropic-version`` (the caller's or the default), the caller's ``anthropic-beta``.

    Names match case-insensitively. A header sent several times (``Headers.items()`` yields each) keeps
    its first ``anthropic-version`` and joins the ``anthropic-beta`` values with commas, as HTTP's
    list syntax allows. Values with line breaks are dropped (header injection).
    """
    version: str | None = None
    betas: list[str] = []
    for name, value in caller_headers.items():
        lowered = name.lower()
        if lowered == "anthropic-version":
            if version is None and _header_safe(value):
                version = value
        elif lowered == "anthropic-beta" and _header_safe(value):
            betas.append(value)
    headers = {"x-api-key": api_key, "anthropic-version": version or DEFAULT_VERSION}
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    return headers


def anthropic_usage(usage: Any) -> Usage:
    """``Usage`` from a Messages ``usage`` object (mapping in the module docstring)."""
    if not isinstance(usage, dict):
        return Usage()
    cache_read = count(usage.get("cache_read_input_tokens"))
    cache_write = count(usage.get("cache_creation_input_tokens"))
    return Usage(
        input_tokens=count(usage.get("input_tokens")) + cache_read + cache_write,
        output_tokens=count(usage.get("output_tokens")),
        cached_input_tokens=cache_read,
    )


class AnthropicStreamUsage:
    """Collects usage from ``message_start`` and ``message_delta``; the latest value of a field wins.
    The same two events name the model and the stop reason (for a trace's attempt span)."""

    __slots__ = ("_counts", "finish_reasons", "model")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.model: str | None = None
        self.finish_reasons: list[str] = []

    def take(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, dict) else None
            model = message.get("model") if isinstance(message, dict) else None
            if type(model) is str:
                self.model = model
        elif kind == "message_delta":
            usage = event.get("usage")
            delta = event.get("delta")
            reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            if type(reason) is str:
                self.finish_reasons = [reason]
        else:
            return
        if isinstance(usage, dict):
            for field in _FIELDS:
                value = usage.get(field)
                if type(value) is int and value >= 0:
                    self._counts[field] = value

    @property
    def usage(self) -> Usage:
        return anthropic_usage(self._counts)
