"""Contract: ``reserve_many`` grants as many admissions as every window check has room for, in one atomic
step, identical on MemoryState and RedisState (the block admission of paced batch items, SPEC §17)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from relay.state import ADMITTED, LimitCheck, SharedState

BIG = 1_000_000  # seconds: the current window does not end during a test


def window(key: str, limit: int, amount: int = 1) -> LimitCheck:
    return LimitCheck(key, "window", limit, BIG, amount)


async def test_grants_up_to_the_room_of_the_tightest_check_and_counts_them(state: SharedState) -> None:
    assert (await state.reserve([window("a", 10)], uuid.uuid4().hex, 30)).admitted  # a holds 1 of 10
    granted, verdict = await state.reserve_many([window("a", 10), window("b", 6)], 8)
    assert (granted, verdict) == (6, ADMITTED)  # b's room, not a's 9 nor the 8 asked
    # Both counters took the 6: a has 3 left, b none.
    assert await state.reserve_many([window("a", 10)], 100) == (3, ADMITTED)
    assert not (await state.reserve([window("b", 6)], uuid.uuid4().hex, 30)).admitted


async def test_a_full_check_refuses_and_nothing_is_taken(state: SharedState) -> None:
    await state.reserve_many([window("full", 2)], 2)
    granted, verdict = await state.reserve_many([window("free", 5), window("full", 2)], 3)
    assert (granted, verdict.admitted, verdict.failed_key) == (0, False, "full")
    assert 1 <= verdict.retry_after <= BIG
    assert await state.reserve_many([window("free", 5)], 9) == (5, ADMITTED)  # "free" was not touched


async def test_the_amount_divides_the_room(state: SharedState) -> None:
    assert await state.reserve_many([window("w", 10, amount=3)], 5) == (3, ADMITTED)  # 9 of 10 used
    assert (await state.reserve_many([window("w", 10, amount=3)], 1))[0] == 0
    assert (await state.reserve([window("w", 10)], uuid.uuid4().hex, 30)).admitted  # the last 1 remains


async def test_concurrent_blocks_and_single_reserves_never_exceed_the_limit(state: SharedState) -> None:
    blocks = [state.reserve_many([window("shared", 50)], 7) for _ in range(6)]
    singles = [state.reserve([window("shared", 50)], uuid.uuid4().hex, 30) for _ in range(20)]
    answers = await asyncio.gather(*blocks, *singles)
    granted = sum(g for g, _ in answers[:6]) + sum(1 for v in answers[6:] if v.admitted)
    assert granted == 50


async def test_only_window_checks_are_taken(state: SharedState) -> None:
    with pytest.raises(ValueError):
        await state.reserve_many([LimitCheck("c", "concurrency", 3)], 2)
