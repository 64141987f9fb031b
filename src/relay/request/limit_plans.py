"""A policy's rate-limit rules compiled into the checks the shared state evaluates (SPEC §5, §17).

Why a module of its own. The limiter (``relay.request.ratelimit``) admits and commits; what it admits
against — one compiled plan for live requests and one for the policy's batch items — is decided here,
once per policy object, so the hot path only looks a plan up.

The batch plan (SPEC §17 "the batch share"). Batch items meet every ``requests``, ``tokens``,
``input_tokens``, ``output_tokens`` and ``concurrency`` rule with its limit replaced by
``policy.batch.share(limit)``, on the SAME counter keys as live requests: live and batch counts are one
count, a live request is admitted below the full limit and a batch item below the share, so live traffic
always finds ``limit − share`` of each window. Budgets (``cost_usd``) keep their limit. When
``batch.max_concurrency`` is set the batch plan has one more concurrency check, on
``pol:{id}:batchlease``: a lease per running batch item, across replicas with Redis, taken in the same
atomic step as the other checks.

It also spells what the plans name: counter keys (``state_key``, and ``caller_key`` for a rule counted
per credential, project or team) and nano-USD amounts (``usd`` in messages, ``json_usd`` in answers).

Invariants: counter keys are ``policy id + short hash of (meter, window seconds, per)`` (see
``relay.request.ratelimit``); a policy whose batch block is the default has a batch plan equal to its
live plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from decimal import Decimal

from relay.domain.ratelimits import RateLimitRule, window_seconds
from relay.snapshot import Policy
from relay.state import LimitCheck

TOKEN_METERS = frozenset(("tokens", "input_tokens", "output_tokens", "cost_usd"))
NANOS_PER_USD = Decimal(1_000_000_000)
#: The meter a ``batch.max_concurrency`` refusal names (metrics, ``BatchRefused.meter``).
MAX_CONCURRENCY_METER = "max_concurrency"


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """One deduplicated rule, compiled: its base state key, check kind and refusal message."""

    key: str
    kind: str
    meter: str
    limit: int
    window_s: int
    per: str
    message: str
    display_limit: str = ""  # the rule's limit as written (a budget's USD amount)

    @property
    def per_caller(self) -> bool:
        return self.per != "policy"

    def check(self, key: str) -> LimitCheck:
        if self.kind == "concurrency":
            return LimitCheck(key, "concurrency", self.limit)
        return LimitCheck(
            key, "window" if self.kind == "window" else "window_peek", self.limit, self.window_s
        )


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """A policy's rules, compiled once. Per-policy checks are built here; per-credential ones per call."""

    rules: tuple[CompiledRule, ...]
    checks: tuple[LimitCheck, ...]  # per-policy checks (static)
    token_windows: tuple[tuple[str, int, str], ...]  # per-policy token windows (static)
    concurrency_keys: tuple[str, ...]  # per-policy concurrency keys (static)
    per_caller: tuple[CompiledRule, ...]  # rules counted per credential, project or team
    needs_lease: bool  # some rule is a concurrency rule
    needs_cost: bool  # some rule is a cost_usd budget


def state_key(policy_id: str, meter: str, window_s: int, per: str) -> str:
    digest = hashlib.sha256(f"{meter}|{window_s}|{per}".encode()).hexdigest()[:10]
    return f"pol:{policy_id}:{digest}"


def batch_lease_key(policy_id: str) -> str:
    """The concurrency key of a policy's running batch items (``batch.max_concurrency``)."""
    return f"pol:{policy_id}:batchlease"


def caller_key(rule: CompiledRule, credential_id: str, project_id: str, team_id: str) -> str:
    if rule.per == "credential":
        return f"{rule.key}:{credential_id}"
    if rule.per == "project":
        return f"{rule.key}:{project_id}"
    return f"{rule.key}:{team_id}"


def usd(nanos: int) -> str:
    """Nano-USD as a plain decimal string of dollars (``12500000000`` → ``12.5``)."""
    return format((Decimal(nanos) / NANOS_PER_USD).normalize(), "f")


def json_usd(nanos: int) -> int | float:
    """Nano-USD as a JSON number of dollars: an int when whole, else the float of the exact decimal
    (JSON has no decimal type; its shortest repr prints the exact digits for any amount ≤ 2**53 nanos)."""
    if nanos % 1_000_000_000 == 0:
        return nanos // 1_000_000_000
    return float(Decimal(nanos) / NANOS_PER_USD)


def compile_rules(policy: Policy) -> tuple[CompiledRule, ...]:
    """The policy's rules as live requests meet them (duplicates of one counter: the strictest)."""
    strictest: dict[tuple[str, int, str], RateLimitRule] = {}
    for rule in policy.rules:
        # A concurrency limit has no window: its counter must not change when the (ignored) window does.
        window_s = 0 if rule.meter == "concurrency" else window_seconds(rule.window)
        ident = (rule.meter, window_s, rule.per)
        if ident not in strictest or rule.limit_nanos < strictest[ident].limit_nanos:
            strictest[ident] = rule
    rules: list[CompiledRule] = []
    for (meter, window_s, per), rule in strictest.items():
        kind = "concurrency" if meter == "concurrency" else "peek" if meter in TOKEN_METERS else "window"
        shown = ""
        if kind == "concurrency":
            text = f'rate limit exceeded: policy "{policy.name}" allows {rule.limit} concurrent requests'
        elif meter == "cost_usd":
            shown = usd(rule.limit_nanos)
            text = f'budget exceeded: policy "{policy.name}" allows ${shown} per {rule.window}'
        else:
            text = (
                f'rate limit exceeded: policy "{policy.name}" allows {rule.limit} {meter} per {rule.window}'
            )
        if per != "policy":
            text += f" per {per}"
        key = state_key(policy.id, meter, window_s, per)
        rules.append(CompiledRule(key, kind, meter, rule.limit_nanos, window_s, per, text, shown))
    return tuple(rules)


def batch_rules(policy: Policy, rules: tuple[CompiledRule, ...]) -> tuple[CompiledRule, ...]:
    """The rules as the policy's batch items meet them: each limit but a budget's at its batch share
    (same counter keys), plus the ``max_concurrency`` lease when set."""
    block = policy.batch
    out: list[CompiledRule] = []
    for rule in rules:
        share = rule.limit if rule.meter == "cost_usd" else block.share(rule.limit)
        if share == rule.limit:
            out.append(rule)
            continue
        note = f" (batch items get {share} of it: live_reserve {block.live_reserve:g})"
        out.append(replace(rule, limit=share, message=rule.message + note))
    if block.max_concurrency is not None:
        text = (
            f'rate limit exceeded: policy "{policy.name}" allows {block.max_concurrency} concurrent batch '
            "items (batch.max_concurrency)"
        )
        key = batch_lease_key(policy.id)
        out.append(
            CompiledRule(key, "concurrency", MAX_CONCURRENCY_METER, block.max_concurrency, 0, "policy", text)
        )
    return tuple(out)


def assemble(rules: tuple[CompiledRule, ...]) -> LimitPlan:
    shared = [r for r in rules if not r.per_caller]
    return LimitPlan(
        rules=rules,
        checks=tuple(r.check(r.key) for r in shared),
        token_windows=tuple((r.key, r.window_s, r.meter) for r in shared if r.kind == "peek"),
        concurrency_keys=tuple(r.key for r in shared if r.kind == "concurrency"),
        per_caller=tuple(r for r in rules if r.per_caller),
        needs_lease=any(r.kind == "concurrency" for r in rules),
        needs_cost=any(r.meter == "cost_usd" for r in rules),
    )
