"""The one wire-shape admission rule (SPEC §7, §7.3, §10.4): for an inbound shape and a routed binding,
pass the request through, translate it, or refuse it — for live requests and batch items alike.

What it knows:
  - same shape → ``PASS_THROUGH`` (``openai``→``openai``, ``anthropic``→``anthropic``,
    ``openai_responses``→``openai_responses``; ``embeddings`` → an ``openai`` binding's /v1/embeddings);
  - ``embeddings`` to another adapter → ``REFUSE_BINDING`` (live: 400 ``unsupported_binding``);
  - ``canonical`` (live only) → ``TRANSLATE``, always (``relay.adapters.canonical``);
  - a provider shape to another adapter: live → ``TRANSLATE`` (§7.3); a batch item under a policy with
    ``batch.translate: true`` → ``TRANSLATE`` too (SPEC §17: exactly the live rule; §10.4's host
    ``openai`` exception gives way to it); any other batch item → ``REFUSE_CROSS_SHAPE``
    (``cross-shape dispatch: item shape <s>, binding adapter <a>``) except §10.4's one exception: an
    ``openai_responses`` item to an ``openai`` binding on the host named ``openai`` goes as it is to
    that host's Chat Completions path (``PASS_THROUGH`` with wire shape ``openai``);
  - an unknown shape or adapter → ``REFUSE_CROSS_SHAPE``.

What it deliberately does not know: how to translate (``relay.adapters.translate``), HTTP statuses.

Invariants: pure, total (never raises); ``wire_shape`` is what the pipeline sends upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from .base import ADAPTERS, CANONICAL, EMBEDDINGS, INBOUND_SHAPES, OPENAI, OPENAI_RESPONSES

RESPONSES_AS_CHAT_HOST: Final = "openai"
"""SPEC §10.4's exception: the host name whose ``openai`` bindings take Responses batch items as they are."""


class Dispatch(Enum):
    PASS_THROUGH = "pass_through"
    TRANSLATE = "translate"
    REFUSE_CROSS_SHAPE = "refuse_cross_shape"
    REFUSE_BINDING = "refuse_binding"


@dataclass(frozen=True, slots=True)
class Admission:
    dispatch: Dispatch
    wire_shape: str  # the shape sent upstream ("" when refused)


_REFUSE_CROSS_SHAPE: Final = Admission(Dispatch.REFUSE_CROSS_SHAPE, "")
_REFUSE_BINDING: Final = Admission(Dispatch.REFUSE_BINDING, "")
_PASS_THROUGH: Final = {shape: Admission(Dispatch.PASS_THROUGH, shape) for shape in INBOUND_SHAPES}
_TRANSLATE: Final = {adapter: Admission(Dispatch.TRANSLATE, adapter) for adapter in ADAPTERS}
"""Every answer ``admit`` gives, built once: it runs twice per live request, and a frozen dataclass
costs a microsecond to build."""


def admit(
    inbound: str, adapter: str, *, host: str, batch: bool = False, translate: bool = False
) -> Admission:
    """How a request of ``inbound`` shape reaches a binding with ``adapter`` on ``host``; ``translate``:
    the batch item's policy lets it be translated (its ``batch.translate``; live requests always are)."""
    if adapter not in ADAPTERS or inbound not in INBOUND_SHAPES:
        return _REFUSE_CROSS_SHAPE
    if inbound == EMBEDDINGS:
        if adapter == OPENAI:
            return _PASS_THROUGH[EMBEDDINGS]
        return _REFUSE_BINDING
    if inbound == adapter:
        return _PASS_THROUGH[inbound]
    if not batch or (translate and inbound != CANONICAL):  # canonical is never batched
        return _TRANSLATE[adapter]
    if inbound == OPENAI_RESPONSES and adapter == OPENAI and host == RESPONSES_AS_CHAT_HOST:
        return _PASS_THROUGH[OPENAI]
    return _REFUSE_CROSS_SHAPE


def can_dispatch(inbound_shape: str, adapter: str) -> bool:
    """True when a live request of ``inbound_shape`` can be served by a binding with ``adapter``."""
    return admit(inbound_shape, adapter, host="").dispatch in (Dispatch.PASS_THROUGH, Dispatch.TRANSLATE)
