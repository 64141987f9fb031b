"""Contract: rate-limit reserve/commit semantics, identical on MemoryState and RedisState (SPEC §5).

Windows are 1 000 000 s wide so a test never straddles a boundary by accident; the one test about a new
window uses 1 s windows and sleeps once.
"""

from __future__ import annotations

import asyncio
import uuid

from relay.state import ADMITTED, LimitCheck, SharedState

BIG = 1_000_000  # seconds; ~11.6 days, so the current window does not end during a test


def window(key: str, limit: int, amount: int = 1, window_s: int = BIG) -> LimitCheck:
    return LimitCheck(key, "window", limit, window_s, amount)


def peek(key: str, limit: int, window_s: int = BIG) -> LimitCheck:
    return LimitCheck(key, "window_peek", limit, window_s, 0)


def slots(key: str, limit: int) -> LimitCheck:
    return LimitCheck(key, "concurrency", limit)


def lease() -> str:
    return uuid.uuid4().hex


async def test_state_implements_the_protocol(state: SharedState) -> None:
    assert isinstance(state, SharedState)
    assert await state.ping() is True


async def test_window_admits_up_to_the_limit_then_refuses(state: SharedState) -> None:
    for _ in range(3):
        assert await state.reserve([window("req", 3)], lease(), 30) == ADMITTED
    verdict = await state.reserve([window("req", 3)], lease(), 30)
    assert not verdict.admitted
    assert verdict.failed_key == "req"
    assert 1 <= verdict.retry_after <= BIG


async def test_window_counts_the_amount(state: SharedState) -> None:
    assert (await state.reserve([window("w", 5, amount=3)], lease(), 30)).admitted
    assert not (await state.reserve([window("w", 5, amount=3)], lease(), 30)).admitted
    assert (await state.reserve([window("w", 5, amount=2)], lease(), 30)).admitted
    assert not (await state.reserve([window("w", 5, amount=1)], lease(), 30)).admitted


async def test_refusal_names_the_failing_check_and_changes_nothing(state: SharedState) -> None:
    assert (await state.reserve([window("full", 1)], lease(), 30)).admitted
    checks = [window("first", 2), slots("slots", 1), window("full", 1)]
    verdict = await state.reserve(checks, lease(), 30)
    assert (verdict.admitted, verdict.failed_key) == (False, "full")
    # Neither the first window nor the concurrency slot was taken by the refused reserve.
    assert (await state.reserve([window("first", 2, amount=2)], lease(), 30)).admitted
    assert (await state.reserve([slots("slots", 1)], lease(), 30)).admitted


async def test_concurrency_refusal_has_retry_after_one_second(state: SharedState) -> None:
    assert (await state.reserve([slots("c", 1)], "a", 30)).admitted
    verdict = await state.reserve([window("w", 10), slots("c", 1)], "b", 30)
    assert (verdict.admitted, verdict.failed_key, verdict.retry_after) == (False, "c", 1.0)
    assert (await state.reserve([window("w", 10, amount=10)], "c", 30)).admitted


async def test_window_peek_checks_consumption_without_adding(state: SharedState) -> None:
    for _ in range(5):
        assert (await state.reserve([peek("tokens", 100)], lease(), 30)).admitted
    await state.commit([("tokens", BIG, 99)], [], "x")
    assert (await state.reserve([peek("tokens", 100)], lease(), 30)).admitted
    await state.commit([("tokens", BIG, 1)], [], "x")
    verdict = await state.reserve([peek("tokens", 100)], lease(), 30)
    assert (verdict.admitted, verdict.failed_key) == (False, "tokens")
    assert 1 <= verdict.retry_after <= BIG


async def test_commit_can_overshoot_and_feeds_window_checks(state: SharedState) -> None:
    await state.commit([("t", BIG, 150), ("t", BIG, 0)], [], "x")
    assert not (await state.reserve([peek("t", 100)], lease(), 30)).admitted
    assert not (await state.reserve([window("t", 151, amount=2)], lease(), 30)).admitted
    assert (await state.reserve([window("t", 151, amount=1)], lease(), 30)).admitted


async def test_windows_of_different_sizes_are_separate_counters(state: SharedState) -> None:
    assert (await state.reserve([window("k", 1, window_s=BIG)], lease(), 30)).admitted
    assert (await state.reserve([window("k", 1, window_s=BIG * 2)], lease(), 30)).admitted


async def test_concurrency_acquire_and_release(state: SharedState) -> None:
    assert (await state.reserve([slots("c", 2)], "a", 30)).admitted
    assert (await state.reserve([slots("c", 2)], "b", 30)).admitted
    assert not (await state.reserve([slots("c", 2)], "c", 30)).admitted
    await state.commit([], ["c"], "a")
    assert (await state.reserve([slots("c", 2)], "c", 30)).admitted
    assert not (await state.reserve([slots("c", 2)], "d", 30)).admitted


async def test_reserving_a_held_lease_again_does_not_count_twice(state: SharedState) -> None:
    assert (await state.reserve([slots("c", 1)], "a", 30)).admitted
    assert (await state.reserve([slots("c", 1)], "a", 30)).admitted
    await state.commit([], ["c"], "a")
    assert (await state.reserve([slots("c", 1)], "b", 30)).admitted


async def test_releasing_unknown_leases_and_empty_calls_are_harmless(state: SharedState) -> None:
    await state.commit([], ["never-reserved"], "nobody")
    await state.commit([], [], "nobody")
    assert await state.reserve([], "nobody", 30) == ADMITTED
    assert (await state.reserve([slots("never-reserved", 1)], "a", 30)).admitted


async def test_expired_leases_free_their_slot(state: SharedState) -> None:
    assert (await state.reserve([slots("c", 1)], "crashed", 0.3)).admitted
    assert not (await state.reserve([slots("c", 1)], "next", 0.3)).admitted
    await asyncio.sleep(0.4)
    assert (await state.reserve([slots("c", 1)], "next", 30)).admitted


async def test_a_new_window_starts_from_zero(state: SharedState) -> None:
    assert (await state.reserve([window("s", 1, window_s=1)], lease(), 30)).admitted
    verdict = await state.reserve([window("s", 1, window_s=1)], lease(), 30)
    assert not verdict.admitted
    assert verdict.retry_after == 1.0  # at least 1 s, and a 1 s window never has more left
    await asyncio.sleep(verdict.retry_after)
    assert (await state.reserve([window("s", 1, window_s=1)], lease(), 30)).admitted


async def test_concurrent_reserves_admit_exactly_the_limit(state: SharedState) -> None:
    checks = [window("burst", 10), slots("burst-slots", 15)]
    verdicts = await asyncio.gather(*(state.reserve(checks, lease(), 30) for _ in range(30)))
    assert sum(v.admitted for v in verdicts) == 10
    assert {v.failed_key for v in verdicts if not v.admitted} == {"burst"}


async def test_refund_gives_an_admitted_window_amount_back_never_below_zero(state: SharedState) -> None:
    for _ in range(2):
        assert (await state.reserve([window("ref", 2)], lease(), 30)).admitted
    assert not (await state.reserve([window("ref", 2)], lease(), 30)).admitted
    await state.refund([("ref", BIG, 1)])
    assert (await state.reserve([window("ref", 2)], lease(), 30)).admitted  # the refunded slot
    assert not (await state.reserve([window("ref", 2)], lease(), 30)).admitted
    await state.refund([("ref", BIG, 5), ("never-used", BIG, 3)])  # more than it holds: down to zero
    assert (await state.reserve([window("ref", 2, amount=2)], lease(), 30)).admitted
    assert not (await state.reserve([window("ref", 2)], lease(), 30)).admitted  # not below zero
    assert (await state.reserve([window("never-used", 1)], lease(), 30)).admitted
    assert not (await state.reserve([window("never-used", 1)], lease(), 30)).admitted


async def test_renewing_a_held_lease_keeps_its_slot_past_its_first_expiry(state: SharedState) -> None:
    """A request running longer than ``lease_s`` (a long stream) keeps its slot while its holder renews
    it; once renewals stop, it expires ``lease_s`` after the last one."""
    assert (await state.reserve([slots("c", 1)], "long", 1.0)).admitted
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.8  # well past the first expiry
    while loop.time() < until:
        await asyncio.sleep(0.1)
        assert await state.renew([("c", "long")], 1.0) == 1
        assert not (await state.reserve([slots("c", 1)], "next", 30)).admitted
    deadline = loop.time() + 10
    while not (await state.reserve([slots("c", 1)], "next", 30)).admitted:
        assert loop.time() < deadline, "a lease nobody renews never expired"
        await asyncio.sleep(0.05)


async def test_renewing_never_takes_back_a_released_or_expired_lease(state: SharedState) -> None:
    assert (await state.reserve([slots("c", 1)], "done", 30)).admitted
    await state.commit([], ["c"], "done")
    assert (await state.reserve([slots("e", 1)], "crashed", 0.2)).admitted
    await asyncio.sleep(0.3)
    assert await state.renew([("c", "done"), ("e", "crashed"), ("never", "nobody")], 30) == 0
    assert await state.renew([], 30) == 0
    assert (await state.reserve([slots("c", 1), slots("e", 1)], "next", 30)).admitted
