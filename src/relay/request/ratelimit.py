"""Rate limits on the hot path (SPEC §5): reserve before the upstream call, commit after it.

What it does: turns a policy's rules into :class:`relay.state.LimitCheck` objects (once per policy
object, cached), asks the shared state to admit them all in one atomic round trip, and after the
upstream call adds the actual tokens and releases concurrency leases in one more round trip.

What it deliberately does not know: HTTP, routing, upstreams, the database. It raises
:class:`relay.errors.RateLimited`; the inference app renders it as a 429 with ``Retry-After``.

Invariants:

- a policy without rules costs nothing: no state call at reserve, none at commit;
- at most one state round trip per phase, whatever the number of rules;
- counters are keyed by ``policy id + short hash of (meter, window seconds, per)`` (+ the credential,
  project or team id for ``per: credential``, ``project``, ``team``): stable across snapshot reloads
  and replicas, and independent of the rule's position in the list. Changing a rule's ``limit`` keeps
  its counter; changing its meter, window or ``per`` starts a new one. Two rules with the same
  (meter, window, per) are one counter, checked against the stricter limit (checking both would count
  the request twice);
- shared state down (``StateUnavailable``) fails *open*: requests are admitted, a warning is logged at
  most once a minute and the ``on_fail_open`` hook counts every occurrence. Limits protect budgets and
  upstream quotas; refusing all traffic because the counter store is away would turn a Redis outage
  into a full outage.

Spend limits (budgets, meter ``cost_usd``) are one more token-like meter: the window's counter holds
integer nano-USD; reserve checks that the committed spend is below the limit (the same ``window_peek``
check as token meters, in the same round trip), commit adds the call's priced cost (in the same
round trip as the token adds). A refusal is :class:`relay.errors.BudgetExceeded`
(``budget_exceeded``, ``budget exceeded: …``). :meth:`RateLimiter.spend` reads what each budget's
current window holds, for ``GET /api/policies/{ref}/spend`` (control plane, not the hot path).

Batch items (SPEC §17) are admitted by :meth:`RateLimiter.reserve_batch` against the policy's batch
plan (``relay.request.limit_plans``): each limit at its batch share on the live counters, plus the
``batch.max_concurrency`` lease; its refusal is :class:`relay.request.reservations.BatchRefused`. Live
admission is unchanged. What an admission hands back (``Reservation``, ``BlockGrant``) is
``relay.request.reservations``.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from relay.adapters.base import Usage
from relay.domain.ratelimits import window_seconds
from relay.domain.times import rfc3339
from relay.errors import BudgetExceeded, RateLimited
from relay.request.fail_open import FailOpen
from relay.request.limit_plans import (
    CompiledRule,
    LimitPlan,
    assemble,
    batch_rules,
    caller_key,
    compile_rules,
    json_usd,
    state_key,
)
from relay.request.reservations import EMPTY_RESERVATION, BatchRefused, BlockGrant, Reservation
from relay.snapshot import Policy
from relay.state import ADMITTED, SharedState, StateUnavailable
from relay.state.leases import LeaseRenewer

log = logging.getLogger("relay.ratelimit")

#: A concurrency lease outlives its request's deadline by this much at most (SPEC §5: a lease of a
#: request that died is released within the request's own deadline plus a few seconds).
LEASE_MARGIN_S = 5.0
#: Compiled plans are cached per policy object; a snapshot reload makes new objects, so the cache is
#: simply dropped when it grows past this (old snapshots' policies are then released).
MAX_CACHED_PLANS = 4096


def _tokens(meter: str, usage: Usage, cost: int) -> int:
    if meter == "cost_usd":
        return cost
    if meter == "tokens":
        return usage.input_tokens + usage.output_tokens
    return usage.input_tokens if meter == "input_tokens" else usage.output_tokens


def _until_reset(rule: CompiledRule, reported: float) -> float:
    """When a refused batch item may be tried again: the store's answer (at least 1 s, as a live
    ``Retry-After`` is), or sooner when the rule's window resets sooner (SPEC §17: an item waits at
    most until the window's reset). Windows are epoch-aligned, so this clock tells; a concurrency
    lease has no reset (its 1 s stands)."""
    if rule.kind == "concurrency":
        return reported
    return min(reported, rule.window_s - time.time() % rule.window_s)


class RateLimiter:
    """Two-phase rate limiting over :class:`relay.state.SharedState` (one per process, built in boot).

    ``lease_s`` bounds how long a request that died with its process holds a concurrency slot: the
    request's own deadline (the upstream timeout) plus :data:`LEASE_MARGIN_S`. While a request runs
    its lease is renewed every ``renew_every_s`` (default ``lease_s / 3``; :mod:`relay.state.leases`),
    so a stream that outlives ``lease_s`` keeps its slot. A live process releases every lease at
    commit; if the store does not answer then, ``RedisState`` re-sends the release once it answers
    again. ``on_fail_open(phase)`` is called (``"reserve"`` or ``"commit"``) each time the state store
    failed and the limiter let the request through — wire it to a metric.
    """

    def __init__(
        self,
        state: SharedState,
        *,
        lease_s: float = 305.0,
        renew_every_s: float | None = None,
        on_fail_open: Callable[[str], None] | None = None,
    ) -> None:
        self._state = state
        self._lease_s = lease_s
        self._renewer = LeaseRenewer(state, lease_s, every_s=renew_every_s)
        self._plans: dict[int, tuple[Policy, LimitPlan]] = {}
        self._batch_plans: dict[int, tuple[Policy, LimitPlan]] = {}
        self._hit_plans: dict[tuple[int, bool], tuple[Policy, LimitPlan]] = {}
        # Lease ids must be unique across replicas (lease sets are shared): a random per-process
        # prefix plus a counter is unique and far cheaper than a uuid per request.
        self._lease_prefix = secrets.token_hex(6)
        self._lease_seq = itertools.count(1)
        self._fail_open = FailOpen(
            log, "rate limits are not enforced", "admitting requests", on_fail_open=on_fail_open
        )

    def _plan(self, policy: Policy) -> LimitPlan:
        # Keyed by identity: a snapshot's Policy objects are immutable, and holding the object in the
        # entry keeps its id from being reused while cached.
        entry = self._plans.get(id(policy))
        if entry is not None and entry[0] is policy:
            return entry[1]
        if len(self._plans) >= MAX_CACHED_PLANS:
            self._plans.clear()
        plan = assemble(compile_rules(policy))
        self._plans[id(policy)] = (policy, plan)
        return plan

    def _batch_plan(self, policy: Policy) -> LimitPlan:
        """The plan batch items of ``policy`` are admitted against (``relay.request.limit_plans``)."""
        entry = self._batch_plans.get(id(policy))
        if entry is not None and entry[0] is policy:
            return entry[1]
        if len(self._batch_plans) >= MAX_CACHED_PLANS:
            self._batch_plans.clear()
        plan = assemble(batch_rules(policy, self._plan(policy).rules))
        self._batch_plans[id(policy)] = (policy, plan)
        return plan

    def _hit_plan(self, policy: Policy, batch: bool) -> LimitPlan:
        """The plan a cache hit is admitted against (SPEC §19): the ``requests`` and ``concurrency``
        rules only (of the batch plan for a batch item) — token rules and budgets neither refuse nor
        charge a hit."""
        entry = self._hit_plans.get((id(policy), batch))
        if entry is not None and entry[0] is policy:
            return entry[1]
        if len(self._hit_plans) >= MAX_CACHED_PLANS:
            self._hit_plans.clear()
        base = self._batch_plan(policy) if batch else self._plan(policy)
        plan = assemble(tuple(rule for rule in base.rules if rule.kind != "peek"))
        self._hit_plans[(id(policy), batch)] = (policy, plan)
        return plan

    async def reserve_batch(
        self, policy: Policy, credential_id: str, *, project_id: str = "", team_id: str = ""
    ) -> Reservation:
        """Admit one batch item of ``policy`` (SPEC §17): every rule at its batch share, on the counters
        live requests use, and the ``batch.max_concurrency`` lease, in one atomic step. A spent share
        or lease raises :class:`BatchRefused` (the meter, and when to try again: the window's reset);
        a spent budget raises :class:`BudgetExceeded` as for live requests. Commit the reservation
        exactly as for :meth:`reserve` (it releases the batch lease too)."""
        return await self.reserve(policy, credential_id, project_id=project_id, team_id=team_id, batch=True)

    async def reserve_batch_block(
        self, policy: Policy, n: int, *, min_left_s: float = 0.0
    ) -> BlockGrant | None:
        """Admit up to ``n`` batch items of ``policy`` in one atomic step (SPEC §17: each admitted
        while the window's count is below the batch share, as :meth:`reserve_batch` would), so a
        paced batch takes its share of a fresh window at once instead of item by item while live
        requests arrive. Only for a batch plan of ``requests`` rules counted per policy (items carry
        nothing to commit); ``None`` for any other (a lease, a token meter or budget, a rule per
        caller, no rule): admit those items one by one. No room raises :class:`BatchRefused`, and so
        does a window with less than ``min_left_s`` left (its admissions could not be used in it: the
        items wait for the next one, nothing is taken); a state store that does not answer answers
        ``None`` (one by one, which fails open)."""
        plan = self._batch_plan(policy)
        if not plan.rules or plan.per_caller or plan.needs_lease or plan.token_windows or plan.needs_cost:
            return None
        now = time.time()
        ending = min(plan.rules, key=lambda rule: now - now % rule.window_s + rule.window_s)
        left_s = now - now % ending.window_s + ending.window_s - now
        if left_s < min_left_s:
            raise BatchRefused(ending.message, retry_after=left_s, meter=ending.meter, share=ending.limit)
        if self._fail_open.skipping():
            return None
        try:
            granted, verdict = await self._state.reserve_many(plan.checks, n)
        except StateUnavailable:
            return None
        now = time.time()
        if granted:
            until = min(now - now % rule.window_s + rule.window_s for rule in plan.rules)
            share = min(rule.limit for rule in plan.rules)
            # Spent: the room ran out before n, or the block is a whole share (that rule was empty).
            return BlockGrant(granted, until, full=granted < n or granted >= share, share=share)
        failed = self._failed_rule(plan, verdict.failed_key, "", "", "")
        wait_s = _until_reset(failed, max(1.0, verdict.retry_after))
        raise BatchRefused(failed.message, retry_after=wait_s, meter=failed.meter, share=failed.limit)

    async def reserve(
        self,
        policy: Policy,
        credential_id: str,
        *,
        project_id: str = "",
        team_id: str = "",
        batch: bool = False,
        hit: bool = False,
    ) -> Reservation:
        """Admit one request under every rule of ``policy``, or raise :class:`RateLimited`.

        ``requests`` windows take 1 and ``concurrency`` takes a lease at once; token meters only check
        that their window is not already used up (the real count is known after the response). All
        rules are applied or none. The caller MUST call :meth:`commit` exactly once for every
        reservation this returns, on every outcome (success, upstream error, client disconnect) —
        with zero or partial usage when there is no full answer — or concurrency slots stay taken
        until ``lease_s`` passes. ``batch``: a batch item's admission (:meth:`reserve_batch`); one
        branch on the live path, no extra call. ``hit``: a response-cache hit's admission (SPEC §19:
        ``requests`` and ``concurrency`` rules only).
        """
        if hit:
            if not policy.rules and not (batch and policy.batch.max_concurrency is not None):
                return EMPTY_RESERVATION
            plan = self._hit_plan(policy, batch)
            if not plan.rules:
                return EMPTY_RESERVATION
        elif batch:
            if not policy.rules and policy.batch.max_concurrency is None:
                return EMPTY_RESERVATION
            plan = self._batch_plan(policy)
        elif not policy.rules:
            return EMPTY_RESERVATION
        else:
            plan = self._plan(policy)
        checks = plan.checks
        token_windows = plan.token_windows
        concurrency_keys = plan.concurrency_keys
        if plan.per_caller:
            extra = [(caller_key(rule, credential_id, project_id, team_id), rule) for rule in plan.per_caller]
            checks += tuple(rule.check(key) for key, rule in extra)
            token_windows += tuple((key, r.window_s, r.meter) for key, r in extra if r.kind == "peek")
            concurrency_keys += tuple(key for key, r in extra if r.kind == "concurrency")
        lease_id = f"{self._lease_prefix}.{next(self._lease_seq)}" if plan.needs_lease else ""
        if token_windows or concurrency_keys:
            reservation = Reservation(lease_id, token_windows, concurrency_keys, plan.needs_cost)
        else:
            reservation = EMPTY_RESERVATION
        if self._fail_open.skipping():
            self._fail_open.failed("reserve", None)
            return reservation
        try:
            verdict = await self._state.reserve(checks, lease_id, self._lease_s)
        except StateUnavailable as exc:
            # The reservation is still returned whole: if the script did run before the error (a
            # timeout), commit releases its lease and records the tokens (and renewing keeps it).
            self._fail_open.failed("reserve", exc)
            verdict = ADMITTED
        if verdict.admitted:
            if lease_id and concurrency_keys:
                self._renewer.hold(lease_id, concurrency_keys)
            return reservation
        failed = self._failed_rule(plan, verdict.failed_key, credential_id, project_id, team_id)
        retry_after = max(1.0, verdict.retry_after)
        if failed.meter == "cost_usd":
            raise BudgetExceeded(failed.message, retry_after=retry_after)
        if batch:
            wait_s = _until_reset(failed, retry_after)
            share = failed.limit if failed.meter == "requests" else None
            raise BatchRefused(failed.message, retry_after=wait_s, meter=failed.meter, share=share)
        raise RateLimited(failed.message, retry_after=retry_after)

    async def commit(self, reservation: Reservation, usage: Usage, cost_nanos: int | None = 0) -> None:
        """Add the request's actual tokens to its token windows and release its concurrency leases.

        Call exactly once per successful :meth:`reserve`, whatever happened upstream; pass the usage
        that was actually consumed (``Usage()`` when the upstream failed before answering) and, when
        ``reservation.needs_cost``, its priced cost in nano-USD (None or 0 when unpriced). Never
        raises for a state failure: the store re-sends the release when it answers again (and the
        lease expires after ``lease_s`` if this process dies first).
        """
        if reservation.lease_id:
            self._renewer.drop(reservation.lease_id)
        cost = cost_nanos or 0
        adds = [
            (key, window_s, amount)
            for key, window_s, meter in reservation.token_windows
            if (amount := _tokens(meter, usage, cost)) > 0
        ]
        if not adds and not reservation.concurrency_keys:
            return
        # No cooldown here, unlike reserve: a lease that is not released holds its slot for lease_s.
        try:
            await self._state.commit(adds, reservation.concurrency_keys, reservation.lease_id)
        except StateUnavailable as exc:
            self._fail_open.failed("commit", exc)

    async def close(self) -> None:
        """Stop renewing leases (shutdown, after the last request committed)."""
        await self._renewer.close()

    @staticmethod
    def _failed_rule(
        plan: LimitPlan, failed_key: str | None, credential_id: str, project_id: str, team_id: str
    ) -> CompiledRule:
        for rule in plan.rules:
            key = caller_key(rule, credential_id, project_id, team_id) if rule.per_caller else rule.key
            if failed_key == key:
                return rule
        return plan.rules[0]  # unreachable unless the store reports a key it was not given

    async def spend(self, policy: Policy) -> list[dict[str, Any]]:
        """What each budget rule's current window has spent (SPEC §5 ``GET /api/policies/{ref}/spend``).

        One entry per counter that holds spend in the current window (for ``per: policy``, always the
        one entry, keyed by the policy id). Amounts are exact nano-USD inside and rendered as JSON
        numbers of dollars at this edge. Raises ``StateUnavailable`` when the store does not answer.
        """
        out: list[dict[str, Any]] = []
        for index, rule in enumerate(policy.rules):
            if rule.meter != "cost_usd":
                continue
            window_s = window_seconds(rule.window)
            key = state_key(policy.id, "cost_usd", window_s, rule.per)
            used, window_end = await self._state.window_usage(key, window_s, per_caller=rule.per != "policy")
            if rule.per == "policy":
                used.setdefault("", 0)
            limit = rule.limit_nanos
            resets_at = rfc3339(datetime.fromtimestamp(window_end, UTC))
            entries = [
                {
                    "key": suffix or policy.id,
                    "spent_usd": json_usd(spent),
                    "remaining_usd": json_usd(max(0, limit - spent)),
                    "resets_at": resets_at,
                }
                for suffix, spent in sorted(used.items())
            ]
            out.append(
                {
                    "index": index,
                    "window": rule.window,
                    "per": rule.per,
                    "limit_usd": json_usd(limit),
                    "entries": entries,
                }
            )
        return out
