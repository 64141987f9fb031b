"""The usage event (SPEC §8): one request's record, and the one builder both planes make it with.

What it does. :class:`UsageEvent` is the value a live request (``relay.inference``) or a batch item (the
batch engine) records; the store writes it as its ``usage_events`` row, reading one attribute per column
(``relay.store.usage``), and ``to_row`` gives that row as a dict. :func:`usage_event` is the one
builder: it fills the route and token fields, applies the one pricing rule of both planes (exact
integer nano-USD, ``relay.pricing``) and fills who is charged, from a live ``Principal`` or a batch's
recorded submitter. :func:`item_event` and :func:`cancelled_event` are a batch item's call of it (source
``batch``, the batch's attribution and shape).

What it deliberately does not know. Writing (``relay.usage.writer`` queues live events; the batch queue
writes an item's event in the transaction that finalizes it), SQL, HTTP, and the attribution rules
themselves (``relay.request.auth``). Importing it imports no writer, metrics or database code, so the batch
queue can carry events without a writer.

Invariants. An event never holds a body or a credential (only the key's sha256, as SPEC §8 names it);
caller-influenced strings are clipped to their columns when the event is built, so an event is always
writable.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final, Protocol

from relay.domain.batch_record import CANCELLED_ERROR
from relay.domain.ids import mint_id, random_hex
from relay.pricing import binding_cost

if TYPE_CHECKING:  # types only: the pipeline never imports this module
    from relay.domain.batch_record import BatchRecord
    from relay.request.pipeline import Outcome
    from relay.request.routing import Plan

MAX_ERROR_MESSAGE: Final = 2000
_CLIPS: Final = (
    ("request_id", 100),
    ("model", 200),
    ("requested_model", 200),
    ("upstream_model", 200),
    ("host", 63),
    ("error_kind", 64),
    ("error_message", MAX_ERROR_MESSAGE),
)


@dataclass(slots=True, kw_only=True)
class UsageEvent:
    """One live request or batch item (SPEC §8). Keyword-only, plain slots: built once per request.

    Strings the SPEC requires are ``''`` when unknown at the end of the request (routing failed before a
    model, host or adapter was chosen); optional fields are None. ``status`` is the upstream's HTTP
    status, 0 when the upstream was never reached. ``error_message`` must never contain a body.
    """

    id: str
    ts: datetime
    request_id: str
    source: str  # "live" | "batch"
    status: int
    inbound_shape: str
    latency_ms: int
    policy_id: str
    project_id: str
    team_id: str
    principal_kind: str
    principal_id: str
    credential_kind: str
    credential_id: str
    batch_id: str | None = None
    batch_idx: int | None = None
    error_kind: str | None = None
    error_message: str | None = None
    model: str = ""
    requested_model: str | None = None  # the model asked for; != model only after a fallback (SPEC §4)
    upstream_model: str = ""
    host: str = ""
    adapter: str = ""
    host_key_id: str | None = None
    attempts: int = 0
    streamed: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int | None = None  # of output_tokens; None: the upstream reports no such count
    cost_nanos: int | None = None
    ttft_ms: int | None = None
    relay_key_hash: str | None = None
    cache_hit: bool = False  # answered from the response cache (SPEC §19)
    offloaded: bool = False  # run by a provider's own batch API, priced at its discount (SPEC §22)
    guardrails: list[dict[str, str]] | None = None  # SPEC §20: the guardrails that blocked or redacted

    def __post_init__(self) -> None:
        """Clip caller-influenced strings to their columns (a client can send a 10 kB model name; the
        event must still be written). Here rather than at the write: the store reads the attributes
        straight into the insert's parameters and the rollup's sums (no dict per event)."""
        for name, size in _CLIPS:
            value = getattr(self, name)
            if value is not None and len(value) > size:
                setattr(self, name, value[:size])

    def to_row(self) -> dict[str, Any]:
        """The ``usage_events`` row as a dict, its timestamp in UTC."""
        row = dict(zip(_EVENT_FIELDS, _EVENT_VALUES(self), strict=True))
        row["ts"] = self.ts.astimezone(UTC)
        return row


_EVENT_FIELDS: Final = tuple(f.name for f in fields(UsageEvent))
_EVENT_VALUES: Final = attrgetter(*_EVENT_FIELDS)


def _outcome_fields(
    plan: Plan | None, outcome: Outcome | None, requested_model: str, attempts: int
) -> dict[str, Any]:
    """The route and token fields of a usage event: what was asked for, where it went, how many
    attempts (``attempts`` when nothing answered: the pipeline's count at its refusal), what it used
    and what it cost.

    The one pricing rule of both planes (SPEC §8, §10.8): only an upstream answer that succeeded is
    priced; a refusal, a passed-through upstream error or nothing run at all has ``cost_nanos`` null."""
    usage = outcome.usage if outcome is not None else None
    # SPEC §20: a whole response a guardrail blocked was still answered by the upstream: priced.
    priced = outcome is not None and outcome.error_kind in (None, "guardrail_blocked")
    if outcome is not None and outcome.cache_hit:  # SPEC §19: a hit costs nothing, charges no key
        priced = False
    return {
        "model": plan.model.name if plan is not None else requested_model,
        # SPEC §4/§8: differs from model only when a fallback answered
        "requested_model": (
            outcome.fallback_from
            if outcome is not None and outcome.fallback_from
            else (plan.model.name if plan is not None else requested_model)
        ),
        "upstream_model": plan.upstream_model if plan is not None else "",
        "host": plan.host.name if plan is not None else "",
        "adapter": plan.binding.adapter if plan is not None else "",
        "host_key_id": outcome.host_key_id if outcome is not None else None,
        "attempts": outcome.attempts if outcome is not None else attempts,
        "input_tokens": usage.input_tokens if usage else 0,
        "output_tokens": usage.output_tokens if usage else 0,
        "cached_input_tokens": usage.cached_input_tokens if usage else 0,
        "reasoning_tokens": usage.reasoning_tokens if usage else None,
        "cost_nanos": (
            binding_cost(plan.binding.pricing, plan.binding.prices, usage)
            if priced and plan and usage
            else (0 if outcome is not None and outcome.cache_hit else None)
        ),
        "cache_hit": outcome is not None and outcome.cache_hit,
    }


class Attributed(Protocol):
    """Who a usage event is charged to: a live request's ``Principal`` or a batch's recorded
    ``BatchRecord`` (SPEC §8, §10.8)."""

    @property
    def policy_id(self) -> str: ...
    @property
    def project_id(self) -> str: ...
    @property
    def team_id(self) -> str: ...
    @property
    def principal_kind(self) -> str: ...
    @property
    def principal_id(self) -> str: ...
    @property
    def credential_kind(self) -> str: ...
    @property
    def credential_id(self) -> str: ...
    @property
    def key_hash(self) -> str | None: ...


def usage_event(
    who: Attributed,
    *,
    source: str,
    request_id: str,
    inbound_shape: str,
    streamed: bool,
    latency_ms: int,
    status: int = 0,
    error_kind: str | None = None,
    error_message: str | None = None,
    plan: Plan | None = None,
    outcome: Outcome | None = None,
    requested_model: str = "",
    attempts: int = 0,
    batch_id: str | None = None,
    batch_idx: int | None = None,
    guardrails: list[dict[str, str]] | None = None,
) -> UsageEvent:
    """The one usage event of a live request or a batch item, charged to ``who``. ``plan`` is where it
    went (None: routing failed), ``outcome`` what the upstream answered (None: nothing answered, and
    ``attempts`` says how many keys were tried before the refusal)."""
    return UsageEvent(
        id=mint_id("ue"),
        ts=datetime.now(UTC),
        request_id=request_id,
        source=source,
        batch_id=batch_id,
        batch_idx=batch_idx,
        status=status,
        error_kind=error_kind,
        error_message=error_message,
        **_outcome_fields(plan, outcome, requested_model, attempts),
        inbound_shape=inbound_shape,
        streamed=streamed,
        latency_ms=latency_ms,
        ttft_ms=outcome.ttft_ms if outcome is not None else None,
        policy_id=who.policy_id,
        project_id=who.project_id,
        team_id=who.team_id,
        principal_kind=who.principal_kind,
        principal_id=who.principal_id,
        credential_kind=who.credential_kind,
        credential_id=who.credential_id,
        relay_key_hash=who.key_hash,
        guardrails=guardrails or None,
    )


def item_event(
    batch: BatchRecord,
    idx: int,
    *,
    status: int = 0,
    error_kind: str | None = None,
    error_message: str | None = None,
    plan: Plan | None = None,
    model: str = "",
    outcome: Outcome | None = None,
    latency_ms: int = 0,
    attempts: int = 0,
    guardrails: list[dict[str, str]] | None = None,
) -> UsageEvent:
    """The usage event of one batch item (SPEC §10.8): source ``batch``, the batch's recorded
    attribution, policy and item shape; never streamed."""
    return usage_event(
        batch,
        source="batch",
        request_id=random_hex(16),
        inbound_shape=batch.inbound_shape,
        streamed=False,
        latency_ms=latency_ms,
        status=status,
        error_kind=error_kind,
        error_message=error_message,
        plan=plan,
        outcome=outcome,
        requested_model=model,
        attempts=attempts,
        batch_id=batch.id,
        batch_idx=idx,
        guardrails=guardrails,
    )


def cancelled_event(batch: BatchRecord, idx: int) -> UsageEvent:
    """The event of an item cancelled before or while it ran (nothing priced)."""
    return item_event(batch, idx, error_kind="cancelled", error_message=CANCELLED_ERROR)
