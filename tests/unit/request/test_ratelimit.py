"""RateLimiter (SPEC §5) over real shared state: meters, per policy/credential, all-or-nothing,
two-phase token accounting, concurrency leases, refusal text, stable counters, the no-rules fast path,
replicas sharing Redis, and failing open when the state store is down.

Windows are 9 999 999 s wide (the widest a rule allows) unless a test is about the window itself, so no
test straddles a window boundary by accident.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from relay.adapters.base import Usage
from relay.errors import RateLimited
from relay.request.ratelimit import RateLimiter
from relay.request.reservations import EMPTY_RESERVATION, Reservation
from relay.snapshot import Policy
from relay.state import RedisState, SharedState
from tests.unit.request.limit_records import CountingState, policy, rule

NO_USAGE = Usage()


async def admitted(limiter: RateLimiter, pol: Policy, n: int, credential: str = "key_a") -> int:
    """Reserve ``n`` times (committing nothing); how many were admitted."""
    count = 0
    for _ in range(n):
        try:
            await limiter.reserve(pol, credential)
        except RateLimited:
            continue
        count += 1
    return count


async def test_no_rules_touches_no_state_and_returns_the_shared_empty_reservation() -> None:
    counting = CountingState()
    limiter = RateLimiter(counting.as_state())
    reservation = await limiter.reserve(policy(), "key_a")
    assert reservation is EMPTY_RESERVATION
    await limiter.commit(reservation, Usage(10, 20))
    assert counting.calls == {}


async def test_requests_meter_admits_the_limit_then_refuses_with_message_and_retry_after(
    state: SharedState,
) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("requests", 3, "1h")], name="standard")
    for _ in range(3):
        # A requests-only policy has nothing to commit: the shared empty reservation comes back.
        assert await limiter.reserve(pol, "key_a") is EMPTY_RESERVATION
    with pytest.raises(RateLimited) as refused:
        await limiter.reserve(pol, "key_a")
    assert refused.value.message == 'rate limit exceeded: policy "standard" allows 3 requests per 1h'
    assert (refused.value.status, refused.value.code) == (429, "rate_limit_exceeded")
    assert 1.0 <= refused.value.retry_after <= 3600


async def test_retry_after_is_the_rest_of_the_window_and_the_next_window_admits(state: SharedState) -> None:
    limiter = RateLimiter(state)
    for attempt in range(3):
        # A fresh policy each try: a stalled machine can carry the two steps across an epoch-aligned
        # reset, and then the second request is rightly admitted in the next window.
        pol = policy([rule("requests", 1, "2s")], id=f"pol_reset_{attempt}")
        left = 2 - time.time() % 2  # do not start in the last moments of a window
        if left < 0.3:
            await asyncio.sleep(left + 0.01)
        await limiter.reserve(pol, "key_a")
        try:
            await limiter.reserve(pol, "key_a")
        except RateLimited as refused_now:
            refused = refused_now
            break
    else:
        pytest.fail("three tries in a row crossed a window reset between two requests")
    assert 1.0 <= refused.retry_after <= 2.0
    await asyncio.sleep(refused.retry_after + 0.05)
    await limiter.reserve(pol, "key_a")  # the next window admits again


async def test_per_policy_is_shared_by_every_credential(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("requests", 4)])
    assert await admitted(limiter, pol, 2, "key_a") == 2
    assert await admitted(limiter, pol, 5, "key_b") == 2


async def test_per_credential_counts_each_credential_apart(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("requests", 2, "1h", per="credential")])
    assert await admitted(limiter, pol, 2, "key_a") == 2
    with pytest.raises(RateLimited) as refused:
        await limiter.reserve(pol, "key_a")
    assert refused.value.message == (
        'rate limit exceeded: policy "standard" allows 2 requests per 1h per credential'
    )
    assert await admitted(limiter, pol, 3, "tok_jti_b") == 2


async def test_rules_are_all_or_nothing(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("requests", 5), rule("concurrency", 1)])
    first = await limiter.reserve(pol, "key_a")
    with pytest.raises(RateLimited) as refused:
        await limiter.reserve(pol, "key_a")  # refused by concurrency: must not spend a request
    assert refused.value.message == 'rate limit exceeded: policy "standard" allows 1 concurrent requests'
    assert refused.value.retry_after == 1.0
    await limiter.commit(first, NO_USAGE)
    for _ in range(4):  # 1 + 4 = the 5 requests the window allows
        await limiter.commit(await limiter.reserve(pol, "key_a"), NO_USAGE)
    with pytest.raises(RateLimited, match="allows 5 requests per"):
        await limiter.reserve(pol, "key_a")


@pytest.mark.parametrize(
    ("meter", "usage"),
    [
        ("tokens", Usage(input_tokens=60, output_tokens=45)),
        ("input_tokens", Usage(input_tokens=105, output_tokens=0)),
        ("output_tokens", Usage(input_tokens=0, output_tokens=105)),
    ],
)
async def test_token_meters_peek_at_reserve_and_count_at_commit(
    state: SharedState, meter: str, usage: Usage
) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule(meter, 100, "1h")])
    # The window is empty: both are admitted even though together they will use more than the limit.
    one = await limiter.reserve(pol, "key_a")
    two = await limiter.reserve(pol, "key_a")
    assert one.token_windows and one.token_windows[0][2] == meter
    await limiter.commit(one, usage)  # 105 > 100: this commit pushes the window over
    with pytest.raises(RateLimited) as refused:
        await limiter.reserve(pol, "key_a")
    assert refused.value.message == f'rate limit exceeded: policy "standard" allows 100 {meter} per 1h'
    await limiter.commit(two, NO_USAGE)


async def test_token_meters_count_only_their_own_tokens(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("input_tokens", 50), rule("output_tokens", 50)])
    await limiter.commit(await limiter.reserve(pol, "key_a"), Usage(input_tokens=49, output_tokens=0))
    await limiter.commit(await limiter.reserve(pol, "key_a"), Usage(input_tokens=0, output_tokens=50))
    with pytest.raises(RateLimited, match="50 output_tokens"):
        await limiter.reserve(pol, "key_a")


async def test_concurrency_slots_are_released_at_commit(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("concurrency", 2)])
    one = await limiter.reserve(pol, "key_a")
    two = await limiter.reserve(pol, "key_b")
    assert one.lease_id and one.lease_id != two.lease_id and one.concurrency_keys
    with pytest.raises(RateLimited):
        await limiter.reserve(pol, "key_c")
    await limiter.commit(one, NO_USAGE)  # an upstream failure still commits, releasing the slot
    three = await limiter.reserve(pol, "key_c")
    with pytest.raises(RateLimited):
        await limiter.reserve(pol, "key_a")
    await limiter.commit(two, NO_USAGE)
    await limiter.commit(three, NO_USAGE)


async def test_concurrency_per_credential(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("concurrency", 1, per="credential")])
    held = await limiter.reserve(pol, "key_a")
    await limiter.reserve(pol, "key_b")
    with pytest.raises(RateLimited, match=r"allows 1 concurrent requests per credential$"):
        await limiter.reserve(pol, "key_a")
    await limiter.commit(held, NO_USAGE)
    await limiter.reserve(pol, "key_a")


async def test_counters_survive_reloads_limit_changes_and_reordering(state: SharedState) -> None:
    limiter = RateLimiter(state)
    assert await admitted(limiter, policy([rule("requests", 3), rule("tokens", 10**6)]), 3) == 3
    # A reload builds new Policy objects; raising the limit and reordering rules keeps the counter.
    reloaded = policy([rule("tokens", 10**6), rule("requests", 5)])
    assert await admitted(limiter, reloaded, 5) == 2
    # Another limiter (another replica on the same state) agrees: keys do not depend on the process.
    assert await admitted(RateLimiter(state), reloaded, 1) == 0
    # A different window is a different counter; so is another policy id.
    assert await admitted(limiter, policy([rule("requests", 5, "9999998s")]), 5) == 5
    assert await admitted(limiter, policy([rule("requests", 5)], id="pol_other"), 5) == 5


async def test_duplicate_rules_are_one_counter_with_the_stricter_limit(state: SharedState) -> None:
    limiter = RateLimiter(state)
    pol = policy([rule("requests", 5), rule("requests", 3), rule("requests", 5)])
    assert await admitted(limiter, pol, 5) == 3  # not 5, and not 1-2 from counting a request twice
    with pytest.raises(RateLimited, match="allows 3 requests"):
        await limiter.reserve(pol, "key_a")


async def test_one_state_call_per_phase_and_none_when_commit_has_nothing_to_do() -> None:
    counting = CountingState()
    limiter = RateLimiter(counting.as_state())
    rules = [rule("requests", 100), rule("tokens", 1000, per="credential"), rule("concurrency", 5)]
    reservation = await limiter.reserve(policy(rules), "key_a")
    assert counting.calls == {"reserve": 1}
    await limiter.commit(reservation, Usage(3, 4))
    assert counting.calls == {"reserve": 1, "commit": 1}
    # Token windows but zero tokens and no concurrency: nothing to send.
    tokens_only = await limiter.reserve(policy([rule("tokens", 1000)], id="pol_tokens"), "key_a")
    await limiter.commit(tokens_only, NO_USAGE)
    assert counting.calls == {"reserve": 2, "commit": 1}
    # Requests only: the reservation is the shared empty one and commit is free.
    requests_only = await limiter.reserve(policy([rule("requests", 9)], id="pol_req"), "key_a")
    await limiter.commit(requests_only, Usage(1, 1))
    assert counting.calls == {"reserve": 3, "commit": 1}


@pytest.mark.redis
async def test_two_replicas_together_admit_exactly_the_limit(
    new_redis_state: Callable[[], RedisState],
) -> None:
    one, two = RateLimiter(new_redis_state()), RateLimiter(new_redis_state())
    pol = policy([rule("requests", 20), rule("concurrency", 1000)])

    async def attempt(i: int) -> Reservation | None:
        try:
            return await (one if i % 2 else two).reserve(pol, f"key_{i % 3}")
        except RateLimited:
            return None

    results = await asyncio.gather(*(attempt(i) for i in range(60)))
    held = [r for r in results if r is not None]
    assert len(held) == 20
    await asyncio.gather(*(one.commit(r, NO_USAGE) for r in held))


@pytest.mark.redis
async def test_replicas_share_concurrency_slots(new_redis_state: Callable[[], RedisState]) -> None:
    one, two = RateLimiter(new_redis_state()), RateLimiter(new_redis_state())
    pol = policy([rule("concurrency", 3)])
    held = [await one.reserve(pol, "key_a"), await two.reserve(pol, "key_a"), await one.reserve(pol, "key_b")]
    with pytest.raises(RateLimited):
        await two.reserve(pol, "key_c")
    await two.commit(held[0], NO_USAGE)  # a lease taken on one replica is released by another
    await two.reserve(pol, "key_c")


async def test_state_down_fails_open_with_a_throttled_warning(caplog: pytest.LogCaptureFixture) -> None:
    down = RedisState("redis://127.0.0.1:1/0", timeout_s=0.5)  # nothing listens on port 1
    phases: list[str] = []
    limiter = RateLimiter(down, on_fail_open=phases.append)
    pol = policy([rule("requests", 1), rule("concurrency", 1)])
    try:
        with caplog.at_level(logging.WARNING, logger="relay.ratelimit"):
            reservations = [await limiter.reserve(pol, "key_a") for _ in range(3)]  # limit 1: all pass
            for reservation in reservations:
                await limiter.commit(reservation, Usage(1, 1))  # never raises
    finally:
        await down.close()
    assert phases == ["reserve"] * 3 + ["commit"] * 3
    warnings = [r for r in caplog.records if r.name == "relay.ratelimit"]
    assert len(warnings) == 1 and "not enforced" in warnings[0].getMessage()
