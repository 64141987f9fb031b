"""A policy's budgets (SPEC §5 ``cost_usd`` rules) as a provider-offloaded batch meets them (SPEC §22):
checked once at submit against the batch's estimated maximum, then charged item by item as each item's
result is mapped.

Why not ``RateLimiter.reserve``: an offloaded batch is paced by the provider, so its items take no
``requests``, token or concurrency admission (rate limits do not apply); only the spend counters the
live plane keeps are read and added to, under the same state keys (``limit_plans.state_key`` and
``limit_plans.caller_key``), so a live request and an offloaded item spend one budget.

What it deliberately does not know: how the estimate is made, HTTP, the database.

Invariants. A policy without a budget costs nothing (no state call). A state store that does not
answer fails open, as the live limiter does: the batch is admitted, the charge is skipped and logged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from relay.errors import BudgetExceeded
from relay.request.limit_plans import CompiledRule, caller_key, compile_rules
from relay.snapshot import Policy
from relay.state import SharedState, StateUnavailable

log = logging.getLogger("relay.ratelimit")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the spend is charged to (a batch's recorded attribution)."""

    credential_id: str
    project_id: str
    team_id: str


def _budgets(policy: Policy) -> tuple[CompiledRule, ...]:
    return tuple(rule for rule in compile_rules(policy) if rule.meter == "cost_usd")


def _key(rule: CompiledRule, caller: Caller) -> str:
    return (
        caller_key(rule, caller.credential_id, caller.project_id, caller.team_id)
        if rule.per_caller
        else rule.key
    )


class BatchBudget:
    def __init__(self, state: SharedState) -> None:
        self._state = state

    async def check(self, policy: Policy, caller: Caller, estimate_nanos: int) -> None:
        """:class:`BudgetExceeded` (the live refusal's code and text) when a budget's current window
        cannot take ``estimate_nanos`` more."""
        for rule in _budgets(policy):
            try:
                used, window_end = await self._state.window_usage(
                    rule.key, rule.window_s, per_caller=rule.per_caller
                )
            except StateUnavailable:
                log.warning("budgets are not checked for an offloaded batch: the shared state is unavailable")
                return
            suffix = _key(rule, caller)[len(rule.key) + 1 :] if rule.per_caller else ""
            if used.get(suffix, 0) + estimate_nanos > rule.limit:
                raise BudgetExceeded(rule.message, retry_after=max(1.0, window_end - time.time()))

    async def charge(self, policy: Policy, caller: Caller, cost_nanos: int) -> None:
        """Add one mapped item's cost to every budget's current window (never raises)."""
        if cost_nanos <= 0:
            return
        adds = [(_key(rule, caller), rule.window_s, cost_nanos) for rule in _budgets(policy)]
        if not adds:
            return
        try:
            await self._state.commit(adds, (), "")
        except StateUnavailable:
            log.warning(
                "an offloaded item's cost was not added to its budgets: the shared state is unavailable"
            )
