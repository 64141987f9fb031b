"""The submit-time half of provider batch offload (SPEC §22): while a §14 or §15 create writes its
items' bodies, note each item's model and size; once they are written, decide (``decision``) whether
the batch goes to the provider, check the submitter's budgets against the batch's estimated maximum,
and give the batch row its offload columns — in the create's one transaction, so no worker ever
claims an item of a batch that is offloaded.

What it does. :meth:`OffloadAtSubmit.watch` answers None (nothing to do: not a §14/§15 batch, or no
binding of the catalog is ``native``, so a deployment without offload pays one scan of its bindings
per catalog snapshot and nothing per create or item); else a :class:`Watch` that the create runs its
bodies through and then asks for the row's columns (:meth:`Watch.columns`). The estimate, per item:
its body's bytes / 4 as input tokens, its ``max_tokens`` (``max_completion_tokens``,
``max_output_tokens``; else ``RELAY_TRANSLATE_DEFAULT_MAX_TOKENS``) as output tokens, priced at the
binding's ``pricing`` times its ``discount``. A budget that cannot take it raises ``BudgetExceeded``
(the façade renders it as it renders a live refusal) and the create writes nothing.

What it deliberately does not know: HTTP, SQL, the provider APIs (the poller sends the batch).

Invariants. The batch is offloaded only when :func:`decision.offload_target` says so and the plan has a
usable key; the chosen key's id is recorded, so every later call to the provider uses its account.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

import orjson

from relay.adapters.base import Usage
from relay.batches.offload.decision import offload_target
from relay.pricing import cost_nanos
from relay.request.auth import Principal
from relay.request.batch_budget import BatchBudget, Caller
from relay.snapshot import Snapshot

#: The façades whose batches may be offloaded (SPEC §22: §14 and §15; a §10 batch always runs here).
APIS: Final = ("openai", "anthropic")
#: ``offload_state`` of a batch decided at submit and not sent yet (the poller sends it).
SUBMITTING: Final = "submitting"
_MAX_TOKENS: Final = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def has_native(snapshot: Snapshot) -> bool:
    return any(binding.offload.native for binding in snapshot.bindings.values())


@dataclass(slots=True)
class Watch:
    """One create's items as they are written: distinct models and the estimate's token sums."""

    principal: Principal
    snapshot: Snapshot
    budget: BatchBudget | None
    default_max_tokens: int
    models: dict[object, None] = field(default_factory=dict)  # distinct ``model`` values, in order
    input_tokens: int = 0
    output_tokens: int = 0
    items: int = 0

    def through(self, bodies: Iterable[bytes]) -> Iterator[bytes]:
        """``bodies`` unchanged, each noted on its way to the payload store."""
        for body in bodies:
            self.note(body)
            yield body

    def note(self, body: bytes | dict[str, Any]) -> None:
        parsed = orjson.loads(body) if isinstance(body, bytes) else body
        raw = len(body) if isinstance(body, bytes) else len(orjson.dumps(body))
        self.items += 1
        model = parsed.get("model") if isinstance(parsed, dict) else None
        self.models.setdefault(model if isinstance(model, str) else None)
        self.input_tokens += raw // 4 + 1
        wanted = next((parsed[k] for k in _MAX_TOKENS if isinstance(parsed, dict) and k in parsed), None)
        self.output_tokens += wanted if isinstance(wanted, int) and wanted > 0 else self.default_max_tokens

    async def columns(self, shape: str) -> dict[str, Any]:
        """The batch row's offload columns (none: it runs on Relay's workers); ``BudgetExceeded`` when
        the submitter's budgets cannot take the batch's estimated maximum."""
        policy = self.principal.policy
        target = offload_target(policy, self.snapshot, shape, self.models, self.items)
        if target is None:
            return {}
        key = next((k for k in target.plan.keys if k.value is not None and k.enabled), None)
        if key is None:
            return {}  # no key to send it with: Relay's workers meet the same pool and say why
        binding = target.plan.binding
        if self.budget is not None:
            full = cost_nanos(binding.pricing, Usage(self.input_tokens, self.output_tokens)) or 0
            estimate = int(Decimal(full) * Decimal(str(binding.offload.discount)))
            who = self.principal
            await self.budget.check(policy, Caller(who.credential_id, who.project_id, who.team_id), estimate)
        return {
            "offload_binding_id": binding.id,
            "offload_key_id": key.id,
            "offload_state": SUBMITTING,
            "offload_polled_at": None,  # never polled: the first round of any replica sends it
        }


class OffloadAtSubmit:
    def __init__(
        self, snapshot: Callable[[], Snapshot], budget: BatchBudget | None, *, default_max_tokens: int
    ) -> None:
        self._snapshot = snapshot
        self._budget = budget
        self._max_tokens = default_max_tokens
        self._native: tuple[Snapshot | None, bool] = (None, False)  # has_native, once per snapshot

    def watch(self, principal: Principal, api: str) -> Watch | None:
        if api not in APIS:
            return None
        snapshot = self._snapshot()
        seen, native = self._native
        if seen is not snapshot:
            native = has_native(snapshot)
            self._native = (snapshot, native)
        if not native:
            return None
        return Watch(principal, snapshot, self._budget, self._max_tokens)
