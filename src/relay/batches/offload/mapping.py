"""A provider's ended batch mapped into the engine's rows (SPEC §22): every result line becomes its
item's final state — ``completed`` with the provider's body kept by the batch's payload store,
``discarded`` with §10.4's ``upstream returned …``, ``cancelled`` when it never ran — with the one usage
event a gateway-run item gets (``source=batch``), marked ``offloaded`` and priced at the binding's
``discount`` × its pricing; each mapped item's cost is then added to the submitter's budgets.

What it deliberately does not know: the provider's wire format (``provider.ProviderLine`` only), SQL
(``BatchStore.settle_offloaded``), when to poll.

Invariants. Lines are mapped a group at a time as they are read (a 50 000-line result file never sits
in memory); a group commits with its events and bodies in one transaction, and only items still open
change, so a mapping cut short (an outage, a replica killed) is finished by the next round with no
item charged twice. Lines the provider never returned are mapped as never run once the file ended.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Final

from relay.adapters.base import EMBEDDINGS
from relay.adapters.usage import usage_from_response
from relay.batches.offload.provider import Ending, ProviderLine, never_ran
from relay.domain.batch_record import BatchRecord
from relay.domain.batches import OPENAI_EMBEDDINGS, expired_error
from relay.payloads.base import KeptResponse, PayloadStores
from relay.request.batch_budget import BatchBudget, Caller
from relay.request.pipeline import Outcome
from relay.request.routing import Plan
from relay.snapshot import Policy
from relay.store.batch_queue import BatchStore, FinalItem
from relay.store.engine import Connection
from relay.usage.event import UsageEvent, cancelled_event, item_event

GROUP: Final = 500  # lines per transaction
NO_RESULT: Final = "upstream returned no readable result for this item"


@dataclass(frozen=True, slots=True)
class Mapping:
    """What one batch's lines are mapped with."""

    record: BatchRecord
    plan: Plan | None  # the binding that ran it, its host and the key it was sent with (None: never sent)
    policy: Policy | None  # the submitter's policy now (its budgets are charged); None: deleted
    budget: BatchBudget | None


def discounted(cost: int | None, discount: float) -> int | None:
    """``discount × cost`` in nano-USD, rounded half up (SPEC §22); None stays unpriced."""
    if cost is None:
        return None
    return int((Decimal(cost) * Decimal(str(discount))).to_integral_value(ROUND_HALF_UP))


def line_event(m: Mapping, idx: int, line: ProviderLine) -> UsageEvent:
    """The item's usage event, as a gateway-run item of the same outcome would have it, offloaded."""
    record, plan = m.record, m.plan
    key_id = plan.keys[0].id if plan is not None and plan.keys else None
    if line.state == "completed":
        shape = EMBEDDINGS if record.inbound_shape == OPENAI_EMBEDDINGS else record.inbound_shape
        usage = usage_from_response(shape, line.body or b"{}")
        outcome = Outcome(line.status or 200, "application/json", line.body, None, 1, key_id, usage)
        event = item_event(record, idx, status=outcome.status, plan=plan, outcome=outcome)
        event.cost_nanos = discounted(event.cost_nanos, plan.binding.offload.discount if plan else 1.0)
    elif line.status is not None:  # the provider answered this line with an error
        outcome = Outcome(
            line.status, "application/json", None, None, 1, key_id, error_kind="upstream_status"
        )
        event = item_event(
            record,
            idx,
            status=line.status,
            error_kind="upstream_status",
            error_message=line.error,
            plan=plan,
            outcome=outcome,
        )
    elif line.error is not None and line.error.startswith("expired: "):
        event = item_event(record, idx, error_kind="expired", error_message=line.error)
    elif line.state == "cancelled":
        event = cancelled_event(record, idx)
    else:  # the provider's batch failed as a whole (its input refused)
        event = item_event(record, idx, error_kind="upstream_status", error_message=line.error, plan=plan)
    event.offloaded = True
    return event


class Mapper:
    """Maps one ended provider batch into its items (:meth:`lines`, then :meth:`rest`)."""

    def __init__(self, store: BatchStore, payloads: PayloadStores, m: Mapping, *, expired: bool) -> None:
        self._expired = expired  # the batch's expires_at passed: Relay forwarded a cancel for it
        self._store = store
        self._payloads = payloads
        self._m = m
        self._group: list[tuple[FinalItem, KeptResponse | None]] = []
        self.mapped = 0  # items this mapper changed (a line mapped before is not counted again)

    async def lines(self, lines: AsyncIterator[ProviderLine]) -> None:
        total = self._m.record.total_items
        async for line in lines:
            try:
                idx = int(line.custom_id)
            except ValueError:
                continue  # not one of ours (Relay sends each item's idx as its custom_id)
            if 0 <= idx < total:
                await self.add(idx, line)
        await self.flush()

    async def rest(self, ending: Ending, failure: str | None) -> None:
        """Map the items no line answered: never run (``expired``: Relay's expiry forwarded the
        cancel, so they end as its sweep ends an item), or discarded with the provider's failure."""
        record = self._m.record
        while True:
            idxs = await self._store.open_offloaded_idxs(record.id, after_idx=-1, limit=GROUP)
            if not idxs:
                break
            for idx in idxs:
                await self.add(idx, self._unanswered(idx, ending, failure))
            if not await self.flush():
                break  # another replica maps the same items: let it finish them
        await self._store.settle_offloaded(record.id, [])  # nothing open: the batch finishes

    def _unanswered(self, idx: int, ending: Ending, failure: str | None) -> ProviderLine:
        if ending == "failed":
            return ProviderLine(str(idx), "discarded", None, None, failure or "the provider's batch failed")
        if ending == "completed":  # every line ran: this one's result is missing or unreadable
            return ProviderLine(str(idx), "discarded", None, None, NO_RESULT)
        return never_ran(str(idx), ending)

    async def add(self, idx: int, line: ProviderLine) -> None:
        record = self._m.record
        if self._expired and line.state == "cancelled" and record.expires_at is not None:
            # Relay's expiry forwarded the cancel: its unrun lines end as the sweep ends an item.
            line = ProviderLine(line.custom_id, "cancelled", None, None, expired_error(record.expires_at))
        kept = None
        if line.state == "completed":
            kept = self._payloads.of(record.payload_store).keep_response(record.id, idx, line.body or b"")
        error = None if line.state == "completed" else (line.error or "upstream returned no result")
        final = FinalItem(
            record.id,
            idx,
            line.state,
            line.status,
            error,
            line_event(self._m, idx, line),
            kept.ref if kept else None,
        )
        self._group.append((final, kept))
        if len(self._group) >= GROUP:
            await self.flush()

    async def flush(self) -> int:
        group, self._group = self._group, []
        if not group:
            return 0
        kept = {final.idx: k for final, k in group if k is not None}
        if kept:
            await self._payloads.flush()
        store_name = self._m.record.payload_store

        async def save(conn: Connection, done: list[FinalItem]) -> None:
            items = [(store_name, f.batch_id, f.idx, kept[f.idx]) for f in done if f.idx in kept]
            if items:
                await self._payloads.save_responses(conn, items)

        done = await self._store.settle_offloaded(self._m.record.id, [f for f, _ in group], save)
        self.mapped += len(done)
        m = self._m
        if m.budget is not None and m.policy is not None:
            caller = Caller(m.record.credential_id, m.record.project_id, m.record.team_id)
            for final in done:
                cost = getattr(final.event, "cost_nanos", None)
                if cost:
                    await m.budget.charge(m.policy, caller, cost)
        return len(done)
