"""Which inbound shape may be sent to which binding adapter (SPEC §7, §10.4).

What it knows: the dispatch rule as it stands —
  - same shape → yes, passed through (``openai``→``openai``, ``anthropic``→``anthropic``,
    ``openai_responses``→``openai_responses``);
  - ``embeddings`` → only a binding with adapter ``openai`` (its ``/v1/embeddings``);
  - ``canonical`` → any adapter, always translated (``relay.adapters.canonical``);
  - anything else → no. Live requests answer it as the handler decides; batch items fail with
    ``cross-shape dispatch: item shape <s>, binding adapter <a>`` (§10.4).

What it deliberately does not know: general cross-shape translation (``openai`` ↔ ``anthropic`` …) —
a later change adds it here and widens ``can_dispatch``; and §10.4's one exception (an
``openai_responses`` batch item sent as-is to host ``openai``'s Chat Completions path), which needs the
host's name and is the batch runner's decision.

Invariants: pure; unknown shape or adapter names answer ``False``, never raise.
"""

from __future__ import annotations

from .base import ADAPTERS, CANONICAL, EMBEDDINGS, OPENAI


def can_dispatch(inbound_shape: str, adapter: str) -> bool:
    """True when a request of ``inbound_shape`` can be served by a binding with ``adapter``."""
    if adapter not in ADAPTERS:
        return False
    if inbound_shape == CANONICAL:
        return True
    if inbound_shape == EMBEDDINGS:
        return adapter == OPENAI
    return inbound_shape == adapter
