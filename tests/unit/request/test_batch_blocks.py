"""Batch items admitted in blocks (SPEC §17 pacing): ``RateLimiter.reserve_batch_block`` admits up to n
items of a paced policy in one atomic step at its batch share, on the counters live requests use, so
live traffic still finds ``limit − share``; plans that carry something per item (a lease, a token
meter, a budget, a rule counted per caller) are not admitted in blocks. Real state only: ``MemoryState``
and the real Redis; replicas are limiters on separate ``RedisState`` instances over one prefix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from relay.domain.batch_policy import BatchPolicy
from relay.errors import RateLimited
from relay.request.ratelimit import RateLimiter
from relay.request.reservations import BatchRefused
from relay.snapshot import Policy
from relay.state import RedisState, SharedState
from tests.unit.request.limit_records import policy, rule


def paced(pol: Policy, **block: object) -> Policy:
    return dataclasses.replace(pol, batch=BatchPolicy.model_validate({"pacing": "wait", **block}))


async def live_admitted(limiter: RateLimiter, pol: Policy, n: int) -> int:
    admitted = 0
    for _ in range(n):
        try:
            await limiter.reserve(pol, "key_a")
        except RateLimited:
            continue
        admitted += 1
    return admitted


async def test_a_block_takes_the_share_at_once_and_live_keeps_the_rest(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 10), rule("requests", 50, "1d")]), live_reserve=0.4)  # shares 6, 30
    first = await limiter.reserve_batch_block(pol, 4)
    assert first is not None and (first.granted, first.full) == (4, False)  # all asked for: room was left
    second = await limiter.reserve_batch_block(pol, 100)
    assert second is not None and (second.granted, second.full) == (2, True)  # the rest of the share
    with pytest.raises(BatchRefused) as refused:
        await limiter.reserve_batch_block(pol, 5)
    assert (refused.value.meter, refused.value.share) == ("requests", 6)
    assert "batch items get 6" in refused.value.message
    with pytest.raises(BatchRefused):
        await limiter.reserve_batch(pol, "key_a")  # one by one sees the same count
    assert await live_admitted(limiter, pol, 10) == 4  # live: the full limit on the same counter
    # A grant may be used until the end of the shortest window (epoch-aligned).
    now = time.time()
    assert second.until == pytest.approx(min(now - now % 9999999 + 9999999, now - now % 86400 + 86400), abs=2)


async def test_live_use_first_leaves_the_block_less(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 10)]), live_reserve=0.5)  # share 5
    assert await live_admitted(limiter, pol, 3) == 3
    grant = await limiter.reserve_batch_block(pol, 50)
    assert grant is not None and (grant.granted, grant.full) == (2, True)  # 5 − the 3 live
    assert await live_admitted(limiter, pol, 10) == 5  # up to the full limit


@pytest.mark.parametrize(
    ("rules", "block"),
    [
        ((), {}),  # nothing to admit: items run with no state call at all
        ((rule("requests", 10, per="credential"),), {}),
        ((rule("tokens", 1000),), {}),
        ((rule("requests", 10), rule("cost_usd", 5, "1d")), {}),
        ((rule("concurrency", 3),), {}),
        ((rule("requests", 10),), {"max_concurrency": 2}),
    ],
)
async def test_plans_with_something_per_item_are_admitted_one_by_one(
    state: SharedState, rules: tuple, block: dict
) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy(list(rules)), live_reserve=0.5, **block)
    assert await limiter.reserve_batch_block(pol, 5) is None
    await limiter.reserve_batch(pol, "key_a")  # and one by one they are admitted as before


async def test_blocks_on_two_replicas_never_exceed_the_share_together(new_redis_state) -> None:  # type: ignore[no-untyped-def]
    replicas: list[RedisState] = [new_redis_state(), new_redis_state()]
    limiters = [RateLimiter(replica) for replica in replicas]
    pol = paced(policy([rule("requests", 40)]), live_reserve=0.25)  # share 30

    async def take(limiter: RateLimiter) -> int:
        try:
            grant = await limiter.reserve_batch_block(pol, 7)
        except BatchRefused:
            return 0
        assert grant is not None
        return grant.granted

    answers = await asyncio.gather(*(take(limiters[i % 2]) for i in range(10)))
    assert sum(answers) == 30


async def test_no_block_is_granted_in_the_last_moments_of_a_window(state: SharedState) -> None:
    limiter = RateLimiter(state)
    # An hour-long window, so the live count below cannot straddle a reset on a slow machine (a 2 s
    # window once let 12 of 20 through in CI); asking for more time than any hour has left is refused
    # until the reset, and nothing is taken.
    pol = paced(policy([rule("requests", 10, "1h")]), live_reserve=0.5)  # share 5
    with pytest.raises(BatchRefused) as refused:
        await limiter.reserve_batch_block(pol, 5, min_left_s=3601)
    assert 0 < refused.value.retry_after <= 3600 and refused.value.share == 5
    assert await live_admitted(limiter, pol, 20) == 10


async def test_a_block_of_the_whole_share_spends_the_window(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = paced(policy([rule("requests", 10)]), live_reserve=0.5)  # share 5
    grant = await limiter.reserve_batch_block(pol, 5)  # exactly the share, asked for exactly
    assert grant is not None and (grant.granted, grant.full, grant.share) == (5, True, 5)
