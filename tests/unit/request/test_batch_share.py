"""The batch share inside the one limiter (SPEC §17): ``RateLimiter.reserve_batch`` admits batch items
against each rule's batch share on the counters live requests use, plus ``batch.max_concurrency`` as a
lease counted across replicas; live admission keeps the full limit, so live traffic always finds
``limit − share``. Real state only: ``MemoryState`` and the real Redis (replicas = limiters on separate
``RedisState`` instances over one prefix).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from relay.adapters.base import Usage
from relay.domain.batch_policy import BatchPolicy
from relay.errors import BudgetExceeded, RateLimited
from relay.request.ratelimit import RateLimiter
from relay.request.reservations import BatchRefused, Reservation
from relay.snapshot import Policy
from relay.state import RedisState, SharedState
from tests.unit.request.limit_records import policy, rule

NO_USAGE = Usage()


def paced(pol: Policy, **block: object) -> Policy:
    return dataclasses.replace(pol, batch=BatchPolicy.model_validate({"pacing": "wait", **block}))


async def count(reserve: Callable[[], object], n: int) -> int:
    admitted = 0
    for _ in range(n):
        try:
            await reserve()  # type: ignore[misc]
        except RateLimited:
            continue
        admitted += 1
    return admitted


async def test_batch_items_stop_at_the_share_and_live_keeps_the_rest(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 10)], name="shared"), live_reserve=0.3)
    assert await count(lambda: limiter.reserve_batch(pol, "key_a"), 20) == 7  # floor(10 × 0.7)
    with pytest.raises(BatchRefused) as refused:
        await limiter.reserve_batch(pol, "key_a")
    # Live requests see the full limit on the same counter: the 3 the batch share leaves.
    assert await count(lambda: limiter.reserve(pol, "key_a"), 20) == 3
    error = refused.value
    assert isinstance(error, RateLimited)
    assert (error.status, error.code, error.meter) == (429, "rate_limit_exceeded", "requests")
    assert error.message.startswith('rate limit exceeded: policy "shared" allows 10 requests per 9999999s')
    assert "batch items get 7" in error.message
    assert 0 < error.retry_after <= 9_999_999


async def test_a_refused_item_may_retry_at_the_window_reset_even_within_a_second(state: SharedState) -> None:
    limiter = RateLimiter(state)
    # Epoch-aligned windows: refuse late in one (0.4–0.7 s left), where a live Retry-After says 1 s. A
    # machine that stalls this task past the window's end moves the steps into the next window: then
    # the sequence is tried again on a fresh policy (its counts start at zero), never judged.
    for _ in range(5):
        pol = paced(policy([rule("requests", 2, "2s")]), live_reserve=0.5)  # share 1
        await asyncio.sleep((1.3 - time.time() % 2) % 2)
        window = time.time() // 2
        await limiter.reserve_batch(pol, "key_a")
        try:
            await limiter.reserve_batch(pol, "key_a")
        except BatchRefused as refused:
            wait_s = refused.retry_after
        else:
            wait_s = None
        if wait_s is None or time.time() // 2 != window:
            continue
        assert 0 < wait_s < 1.0
        await limiter.reserve(pol, "key_a")  # live takes the one the share left
        with pytest.raises(RateLimited) as live:
            await limiter.reserve(pol, "key_a")
        if time.time() // 2 != window:
            continue
        assert live.value.retry_after == 1.0  # a live Retry-After is never under 1 s
        await asyncio.sleep(wait_s + 0.02)
        await limiter.reserve_batch(pol, "key_a")  # the next window has room again
        return
    pytest.fail("five tries each ran past their window's end: the machine stalled this task every time")


async def test_live_use_counts_against_the_batch_share(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 10)]), live_reserve=0.5)
    assert await count(lambda: limiter.reserve(pol, "key_a"), 4) == 4
    assert await count(lambda: limiter.reserve_batch(pol, "key_a"), 10) == 1  # 4 live + 1 batch = share 5
    assert await count(lambda: limiter.reserve(pol, "key_a"), 10) == 5  # live still reaches the limit


async def test_token_meters_are_checked_against_the_share(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("tokens", 100)]), live_reserve=0.5)
    reservation = await limiter.reserve_batch(pol, "key_a")
    await limiter.commit(reservation, Usage(30, 20))  # 50 used: the share (50) is spent
    with pytest.raises(BatchRefused) as refused:
        await limiter.reserve_batch(pol, "key_a")
    assert refused.value.meter == "tokens"
    live = await limiter.reserve(pol, "key_a")  # 50 < 100: live is admitted
    await limiter.commit(live, NO_USAGE)


async def test_the_default_block_admits_batch_items_at_the_full_limit(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("requests", 4)], name="plain")
    assert await count(lambda: limiter.reserve_batch(pol, "key_a"), 10) == 4
    with pytest.raises(BatchRefused) as refused:
        await limiter.reserve_batch(pol, "key_a")
    assert refused.value.message == 'rate limit exceeded: policy "plain" allows 4 requests per 9999999s'


async def test_a_share_never_drops_below_one(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 3)]), live_reserve=0.9)
    assert await count(lambda: limiter.reserve_batch(pol, "key_a"), 5) == 1


async def test_per_credential_rules_get_the_share_per_credential(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 4, per="credential")]), live_reserve=0.5)
    assert await count(lambda: limiter.reserve_batch(pol, "key_a"), 5) == 2
    assert await count(lambda: limiter.reserve_batch(pol, "key_b"), 5) == 2


async def test_budgets_are_not_paced_a_spent_budget_stays_budget_exceeded(state: SharedState) -> None:
    limiter = RateLimiter(state)
    budget = rule("cost_usd", 1)
    pol = paced(policy([budget]), live_reserve=0.5)
    reservation = await limiter.reserve_batch(pol, "key_a")
    assert reservation.needs_cost
    await limiter.commit(reservation, Usage(1, 1), cost_nanos=1_000_000_000)
    with pytest.raises(BudgetExceeded) as refused:
        await limiter.reserve_batch(pol, "key_a")
    assert not isinstance(refused.value, BatchRefused)
    assert refused.value.message.startswith("budget exceeded: ")


async def test_max_concurrency_is_a_lease_released_at_commit(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy(name="capped"), max_concurrency=2)  # no rules: the lease alone
    held = [await limiter.reserve_batch(pol, "key_a") for _ in range(2)]
    with pytest.raises(BatchRefused) as refused:
        await limiter.reserve_batch(pol, "key_a")
    assert refused.value.meter == "max_concurrency"
    assert refused.value.message == (
        'rate limit exceeded: policy "capped" allows 2 concurrent batch items (batch.max_concurrency)'
    )
    await limiter.reserve(pol, "key_a")  # live requests do not take batch leases
    await limiter.commit(held[0], NO_USAGE)
    again = await limiter.reserve_batch(pol, "key_a")
    assert isinstance(again, Reservation) and again.concurrency_keys == ("pol:pol_test:batchlease",)
    for reservation in (held[1], again):
        await limiter.commit(reservation, NO_USAGE)
    await limiter.close()


async def test_max_concurrency_counts_across_replicas(new_redis_state: Callable[[], RedisState]) -> None:
    limiters = [RateLimiter(new_redis_state()) for _ in range(3)]
    pol = paced(policy([rule("requests", 1000)]), max_concurrency=4)
    outcomes = await asyncio.gather(
        *(limiter.reserve_batch(pol, "key_a") for limiter in limiters for _ in range(5)),
        return_exceptions=True,
    )
    granted = [(i // 5, o) for i, o in enumerate(outcomes) if isinstance(o, Reservation)]
    assert len(granted) == 4
    assert all(isinstance(o, BatchRefused) for o in outcomes if not isinstance(o, Reservation))
    # A lease taken on one replica is released by its commit there; another replica then gets it.
    replica, reservation = granted[0]
    await limiters[replica].commit(reservation, NO_USAGE)
    await limiters[(replica + 1) % 3].reserve_batch(pol, "key_a")
    for limiter in limiters:
        await limiter.close()


async def test_three_replicas_together_admit_exactly_the_share(
    new_redis_state: Callable[[], RedisState],
) -> None:
    limiters = [RateLimiter(new_redis_state()) for _ in range(3)]
    pol = paced(policy([rule("requests", 40)]), live_reserve=0.25)  # share 30

    async def one(limiter: RateLimiter) -> bool:
        try:
            await limiter.reserve_batch(pol, "key_a")
        except BatchRefused:
            return False
        return True

    results = await asyncio.gather(*(one(limiter) for limiter in limiters for _ in range(25)))
    assert sum(results) == 30
    # Live traffic on any replica still finds exactly the 10 the share leaves.
    live = await asyncio.gather(*(count(lambda lim=lim: lim.reserve(pol, "key_a"), 10) for lim in limiters))
    assert sum(live) == 10
