"""What translation may drop and how it refuses the rest (SPEC §7.3 "nothing is dropped silently").

What it knows: the documented short list of pure hints — fields that never change the answer, only
where it is stored, billed or cached (``HINTS``) — and the values that equal a provider default and
so ask for nothing (``NOOP_VALUES``: ``n: 1``, ``logprobs: false``, a zero penalty, …). Any other field
the shape's reader does not map is refused with 400 ``unsupported_parameter`` naming the field and the
binding's adapter, before any upstream call. docs/inference-api.md carries the same lists.

What it deliberately does not know: which fields a shape maps (its reader, ``relay.adapters.<shape>_ir``).

Invariants: ``unsupported`` always builds the same message, ``unsupported_parameter: <param> (adapter
<a>)``, which is also the whole Anthropic-shaped message (that shape has no ``code``).
"""

from __future__ import annotations

from typing import Any, Final

from .base import AdapterError

HINTS: Final = frozenset({"store", "service_tier", "prompt_cache_key", "safety_identifier"})
"""Dropped whatever their value: storage, billing tier, cache routing and abuse-monitoring hints."""

NOOP_VALUES: Final[dict[str, tuple[Any, ...]]] = {
    "n": (1,),
    "logprobs": (False,),
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "parallel_tool_calls": (True,),
    "truncation": ("disabled",),
    "metadata": ({},),
    "stream_options": (None,),
}
"""Dropped only with these values, which are the providers' defaults (any other value is refused)."""


def unsupported(param: str, adapter: str) -> AdapterError:
    return AdapterError("unsupported_parameter", f"unsupported_parameter: {param} (adapter {adapter})")


def check_rest(body: dict[str, Any], mapped: frozenset[str], adapter: str) -> None:
    """Refuse the first top-level field of ``body`` that is neither mapped, a hint nor a no-op value."""
    for name, value in body.items():
        if name in mapped or name in HINTS or value is None:
            continue
        noop = NOOP_VALUES.get(name)
        if noop is not None and any(value == v and type(value) is type(v) for v in noop):
            continue
        raise unsupported(name, adapter)


def invalid(message: str) -> AdapterError:
    """A request the translator cannot read (the provider would answer 400 too)."""
    return AdapterError("invalid_request", message)


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (readers of upstream bodies never raise)."""
    return value if isinstance(value, dict) else {}


def present(**fields: Any) -> dict[str, Any]:
    """The fields that are set (not None), in the order given: a body's optional fields, which every
    shape leaves out rather than sending null."""
    return {name: value for name, value in fields.items() if value is not None}
