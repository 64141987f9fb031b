"""A response-cache hit's admission (SPEC §19) in the RateLimiter over real shared state (memory and
Redis): ``requests`` and ``concurrency`` rules count and refuse it; token rules and budgets neither
refuse nor charge it."""

from __future__ import annotations

import pytest

from relay.adapters.base import Usage
from relay.domain.ratelimits import RateLimitRule
from relay.errors import RateLimited
from relay.request.ratelimit import RateLimiter
from relay.request.reservations import EMPTY_RESERVATION
from relay.state import SharedState
from tests.unit.request.limit_records import policy


def rule(**fields: object) -> RateLimitRule:
    return RateLimitRule.model_validate(fields)


SPENT = [rule(meter="tokens", limit=1, window="1d"), rule(meter="cost_usd", limit="0.000000001", window="1d")]


async def test_token_rules_and_budgets_neither_refuse_nor_charge_a_hit(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy(SPENT)
    first = await limiter.reserve(pol, "key_1")
    await limiter.commit(first, Usage(input_tokens=10, output_tokens=10), 1_000)  # both now spent
    with pytest.raises(RateLimited):
        await limiter.reserve(pol, "key_1")  # a miss is refused
    for _ in range(3):
        hit = await limiter.reserve(pol, "key_1", hit=True)
        assert hit is EMPTY_RESERVATION  # nothing to check, nothing to commit
        await limiter.commit(hit, Usage())


async def test_a_requests_rule_counts_hits_and_misses_together(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule(meter="requests", limit=3, window="1d"), *SPENT])
    miss = await limiter.reserve(pol, "key_1")
    await limiter.commit(miss, Usage(input_tokens=10, output_tokens=10), 1_000)
    for _ in range(2):
        hit = await limiter.reserve(pol, "key_1", hit=True)
        assert hit.token_windows == () and not hit.needs_cost
        await limiter.commit(hit, Usage())
    with pytest.raises(RateLimited) as refused:
        await limiter.reserve(pol, "key_1", hit=True)
    assert "requests" in refused.value.message


async def test_a_concurrency_rule_holds_a_hits_slot_until_it_is_released(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule(meter="concurrency", limit=1)])
    held = await limiter.reserve(pol, "key_1", hit=True)
    with pytest.raises(RateLimited):
        await limiter.reserve(pol, "key_1", hit=True)
    await limiter.commit(held, Usage())
    again = await limiter.reserve(pol, "key_1", hit=True)
    await limiter.commit(again, Usage())
    await limiter.close()
