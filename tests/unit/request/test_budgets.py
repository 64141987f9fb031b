"""Spend limits (SPEC §5, meter ``cost_usd``) in the RateLimiter over real shared state (memory and
Redis): exact decimal limits in nano-USD, admission while the committed spend is below the limit,
``per`` policy / credential / project / team, the 1w / 30d epoch-aligned windows, the refusal's code,
text and Retry-After, the spend read behind ``GET /api/policies/{ref}/spend``, and rule validation."""

from __future__ import annotations

import time

import pytest
from pydantic import ValidationError

from relay.adapters.base import Usage
from relay.domain.ratelimits import RateLimitRule, window_seconds
from relay.errors import BudgetExceeded, RateLimited
from relay.pricing import cost_from_prices, cost_nanos, nano_prices
from relay.request.ratelimit import RateLimiter
from relay.snapshot import Binding
from relay.state import SharedState
from tests.unit.request.limit_records import CountingState, policy

USAGE = Usage(input_tokens=2, output_tokens=3)


def budget(limit: object, window: str = "30d", per: str = "policy") -> RateLimitRule:
    return RateLimitRule.model_validate({"meter": "cost_usd", "limit": limit, "window": window, "per": per})


def test_limits_are_parsed_exactly_into_nano_usd() -> None:
    assert budget("0.1").limit_nanos == 100_000_000
    assert budget(0.1).limit_nanos == 100_000_000  # a JSON number: its digits, not its binary value
    assert budget(25).limit_nanos == 25_000_000_000
    assert budget("0.000000001").limit_nanos == 1
    assert budget(0).limit_nanos == 0
    assert budget("12.50").model_dump()["limit"] == 12.5
    assert budget(25).model_dump()["limit"] == 25


@pytest.mark.parametrize(
    ("rule", "field"),
    [
        ({"meter": "cost_usd", "limit": -1, "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": "ten", "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": True, "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": "0.0000000001", "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": "1e400", "window": "1d"}, "limit"),
        ({"meter": "cost_usd", "limit": 1, "window": "2w"}, "window"),
        ({"meter": "cost_usd", "limit": 1, "window": "1d", "per": "org"}, "per"),
        ({"meter": "requests", "limit": 1.5}, "limit"),
        ({"meter": "dollars", "limit": 1}, "meter"),
    ],
)
def test_bad_rules_name_the_field(rule: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        RateLimitRule.model_validate(rule)
    assert refused.value.errors()[0]["loc"][0] == field


def test_longer_windows() -> None:
    assert window_seconds("1w") == 604_800
    assert window_seconds("30d") == 2_592_000


def test_integer_prices_give_the_decimal_cost_to_the_nano() -> None:
    for pricing in ({"input": 1.0, "output": 2.0}, {"input": 0.15, "output": 0.6, "cached_input": 0.075}):
        prices = nano_prices(pricing)
        assert prices is not None
        for usage in (USAGE, Usage(input_tokens=12345, output_tokens=678, cached_input_tokens=999)):
            assert cost_from_prices(prices, usage) == cost_nanos(pricing, usage)
    assert nano_prices({"input": "0.0000000001", "output": 1}) is None  # falls back to Decimal
    assert nano_prices(None) is None


async def test_budget_admits_while_committed_spend_is_below_the_limit(state: SharedState) -> None:
    limiter = RateLimiter(state)
    # 8000 nano-USD per call (2 × $1/M + 3 × $2/M); $0.000024 = exactly three calls.
    pol = policy([budget("0.000024")], id=f"pol_b{time.time_ns()}")
    cost = cost_nanos({"input": 1.0, "output": 2.0}, USAGE)
    assert cost == 8000
    for _ in range(3):
        reservation = await limiter.reserve(pol, "key_a")
        assert reservation.needs_cost
        await limiter.commit(reservation, USAGE, cost)
    with pytest.raises(BudgetExceeded) as refused:
        await limiter.reserve(pol, "key_a")
    assert isinstance(refused.value, RateLimited)
    assert refused.value.code == "budget_exceeded"
    assert refused.value.message == 'budget exceeded: policy "standard" allows $0.000024 per 30d'
    window = 2_592_000
    remaining = window - time.time() % window
    assert remaining - 5 <= refused.value.retry_after <= remaining + 1
    [rule] = await limiter.spend(pol)
    assert rule["limit_usd"] == 0.000024 and rule["per"] == "policy" and rule["window"] == "30d"
    [entry] = rule["entries"]
    assert entry["key"] == pol.id and entry["spent_usd"] == 0.000024 and entry["remaining_usd"] == 0
    assert entry["resets_at"].endswith("Z")


@pytest.mark.parametrize("per", ["credential", "project", "team"])
async def test_budget_per_caller_counts_each_caller_apart(state: SharedState, per: str) -> None:
    limiter = RateLimiter(state)
    pol = policy([budget("0.000008", "1w", per)], id=f"pol_c{time.time_ns()}")
    callers = {"a": ("key_a", "prj_a", "tm_a"), "b": ("key_b", "prj_b", "tm_b")}
    for cred, project, team in callers.values():
        reservation = await limiter.reserve(pol, cred, project_id=project, team_id=team)
        await limiter.commit(reservation, USAGE, 8000)
    for cred, project, team in callers.values():
        with pytest.raises(BudgetExceeded, match=f"per 1w per {per}$"):
            await limiter.reserve(pol, cred, project_id=project, team_id=team)
    # Another credential of project a / team a shares the counter only for per: project / team.
    other = ("key_c", "prj_a", "tm_a")
    if per == "credential":
        await limiter.reserve(pol, other[0], project_id=other[1], team_id=other[2])
    else:
        with pytest.raises(BudgetExceeded):
            await limiter.reserve(pol, other[0], project_id=other[1], team_id=other[2])
    [rule] = await limiter.spend(pol)
    index = {"credential": 0, "project": 1, "team": 2}[per]
    assert sorted(e["key"] for e in rule["entries"]) == sorted(c[index] for c in callers.values())
    assert all(e["spent_usd"] == 0.000008 for e in rule["entries"])


async def test_budget_costs_no_extra_round_trip() -> None:
    counting = CountingState()
    limiter = RateLimiter(counting.as_state())
    pol = policy([budget(1, "1d"), RateLimitRule(meter="tokens", limit=10**6, window="1h")])
    reservation = await limiter.reserve(pol, "key_a")
    await limiter.commit(reservation, USAGE, 8000)
    assert counting.calls == {"reserve": 1, "commit": 1}


def test_binding_snapshot_field_defaults_to_unpriced() -> None:
    binding = Binding("b", "b", "m", "h", "openai", None, None, True)
    assert binding.prices is None
