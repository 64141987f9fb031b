"""Whether a submitted batch goes to a provider's batch API (SPEC §22), decided once, at submit.

The rule: every item routes — under the submitter's policy, with the one routing step of live
requests (``request.routing.resolve``, no fallbacks: a provider batch has one model) — to the same
binding, that binding's ``batch_offload`` says ``native`` and the batch has at least its
``min_items`` items, and the items' shape is the binding's own (the provider's batch API takes the
request as it is: a batch that needs translation runs on Relay's workers). Anything else — an item
whose model is unknown, refused or unroutable, two bindings, too few items — is no offload: the batch
runs on Relay's workers, where each item fails or succeeds as §10.4 says.

What it deliberately does not know: HTTP, the database, budgets (the submitter checks them against
the batch's estimated maximum), and which provider module speaks to the host (``adapter`` tells).

Invariants: at most one ``resolve`` per distinct model name, whatever the batch's size; pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from relay.errors import RelayError
from relay.request.routing import Plan, resolve
from relay.snapshot import Policy, Snapshot

#: Item shape → (the adapter that takes it as it is, the provider batch endpoint it is sent to).
NATIVE_ENDPOINTS: dict[str, tuple[str, str]] = {
    "openai": ("openai", "/v1/chat/completions"),
    "openai_embeddings": ("openai", "/v1/embeddings"),
    "openai_responses": ("openai_responses", "/v1/responses"),
    "anthropic": ("anthropic", "/v1/messages"),
}


@dataclass(frozen=True, slots=True)
class OffloadTarget:
    """Where an offloaded batch goes: the plan every item routed to, and the provider endpoint."""

    plan: Plan
    endpoint: str


def offload_target(
    policy: Policy, snapshot: Snapshot, shape: str, models: Iterable[object], items: int
) -> OffloadTarget | None:
    """The target when the batch of ``items`` items (``models``: each item's ``model`` value, in
    order) qualifies for offload, else None."""
    native = NATIVE_ENDPOINTS.get(shape)
    if native is None or items < 1:
        return None
    adapter, endpoint = native
    plans: dict[str, Plan] = {}
    target: Plan | None = None
    for model in models:
        if not isinstance(model, str):
            return None
        plan = plans.get(model)
        if plan is None:
            try:
                plan = plans[model] = resolve(policy, model, snapshot)
            except RelayError:
                return None
        if target is None:
            target = plan
            if plan.binding.adapter != adapter or not plan.binding.offload.offloads(items):
                return None
        elif plan.binding.id != target.binding.id:
            return None
    return OffloadTarget(target, endpoint) if target is not None else None
