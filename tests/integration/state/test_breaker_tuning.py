"""Contract: a host's breaker tuning (SPEC §6 "Tuning"), identical on MemoryState and RedisState.

A 5xx or connection error opens a key only as the ``threshold``-th such failure within ``window_s``;
401/403 and long 429s still open at once; the backoff stops at ``max_open_s``; exactly one call writes
each opening (``opened``) and exactly one closes it (``reset`` answers True), so each is logged once.
The last tests run two ``RedisState`` objects on one prefix: two replicas counting one key's failures.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from relay.domain.breaker import BreakerTuning
from relay.state import BreakerRecord, RedisState, SharedState

TOLERANCE_S = 0.5
THREE_IN_30 = BreakerTuning(threshold=3, window_s=30)


def opens_in(record: BreakerRecord) -> float:
    assert record.open_until is not None
    return record.open_until - time.time()


async def backoff_trip(
    state: SharedState, key: str, tuning: BreakerTuning, seen: int = 0
) -> BreakerRecord | None:
    return await state.trip(key, reason="upstream_5xx", version="v1", seen=seen, tuning=tuning)


async def test_a_closed_key_opens_on_the_threshold_th_failure(state: SharedState) -> None:
    assert await backoff_trip(state, "k", THREE_IN_30) is None
    assert await backoff_trip(state, "k", THREE_IN_30) is None
    assert await state.breakers(["k"]) == {}  # still closed: every request may use it
    record = await backoff_trip(state, "k", THREE_IN_30)
    assert record is not None and record.opened
    assert (record.failures, record.reason) == (1, "upstream_5xx")
    assert opens_in(record) == pytest.approx(1, abs=TOLERANCE_S)  # the ladder starts at 1 s
    assert await state.breakers(["k"]) == {"k": record}


async def test_failures_spread_wider_than_the_window_never_open(state: SharedState) -> None:
    tuning = BreakerTuning(threshold=2, window_s=0.3)
    for _ in range(3):
        assert await backoff_trip(state, "k", tuning) is None
        await asyncio.sleep(0.5)  # past the window: the previous failure no longer counts
    assert await state.breakers(["k"]) == {}


async def test_the_count_starts_again_after_an_opening(state: SharedState) -> None:
    tuning = BreakerTuning(threshold=2, window_s=30)
    await backoff_trip(state, "k", tuning)
    opened = await backoff_trip(state, "k", tuning)
    assert opened is not None and opened.opened
    assert await state.reset("k", opened.trip_id) is True  # the probe succeeded: closed
    assert await backoff_trip(state, "k", tuning) is None  # one failure of the fresh count
    again = await backoff_trip(state, "k", tuning)
    assert again is not None and again.failures == 1  # a closed key starts the ladder at 1 s again


async def test_a_failed_half_open_probe_reopens_at_once_one_step_up(state: SharedState) -> None:
    tuning = BreakerTuning(threshold=5, window_s=30)
    for _ in range(4):
        await backoff_trip(state, "k", tuning)
    first = await backoff_trip(state, "k", tuning)
    assert first is not None and first.failures == 1
    reopened = await backoff_trip(state, "k", tuning, seen=first.trip_id)  # the probe of that opening
    assert reopened is not None and reopened.opened and reopened.failures == 2
    assert opens_in(reopened) == pytest.approx(2, abs=TOLERANCE_S)


async def test_a_failure_sent_before_the_opening_counts_for_nothing(state: SharedState) -> None:
    tuning = BreakerTuning(threshold=2, window_s=30)
    await backoff_trip(state, "k", tuning)
    opened = await backoff_trip(state, "k", tuning)
    assert opened is not None
    late = await backoff_trip(state, "k", tuning, seen=0)  # chose the key while it was closed
    assert late == opened and not late.opened  # unchanged, and not a second opening to log


async def test_auth_failures_and_long_429s_open_at_once_whatever_the_threshold(state: SharedState) -> None:
    auth = await state.trip("a", reason="upstream_auth_failed", version="v1", permanent=True)
    assert auth is not None and auth.opened and auth.open_until is None
    again = await state.trip("a", reason="upstream_auth_failed", version="v1", permanent=True)
    assert again == auth and not again.opened  # already open until edited: nothing new to log
    limited = await state.trip("r", reason="upstream_rate_limited", version="v1", retry_after=30)
    assert limited is not None and limited.opened
    assert opens_in(limited) == pytest.approx(30, abs=TOLERANCE_S)


async def test_max_open_s_caps_the_backoff_ladder(state: SharedState) -> None:
    tuning = BreakerTuning(max_open_s=3)
    ladder = []
    for _ in range(5):
        record = await backoff_trip(state, "k", tuning, seen=ladder[-1].trip_id if ladder else 0)
        assert record is not None
        ladder.append(record)
    assert opens_in(ladder[0]) == pytest.approx(1, abs=TOLERANCE_S)
    assert [r.failures for r in ladder] == [1, 2, 3, 4, 5]
    assert opens_in(ladder[-1]) == pytest.approx(3, abs=TOLERANCE_S)  # 1, 2, 3, 3, 3 — not 16


async def test_a_longer_max_open_s_lets_the_ladder_climb_past_60_s(state: SharedState) -> None:
    tuning = BreakerTuning(max_open_s=600)
    record = None
    for _ in range(8):
        record = await state.trip("k", reason="upstream_5xx", version="v1", tuning=tuning)
    assert record is not None and record.failures == 8
    assert opens_in(record) == pytest.approx(128, abs=TOLERANCE_S)


async def test_only_one_reset_closes_an_opening(state: SharedState) -> None:
    opened = await state.trip("k", reason="upstream_5xx", version="v1")
    assert opened is not None
    assert await state.reset("k", opened.trip_id) is True
    assert await state.reset("k", opened.trip_id) is False  # already closed: not logged twice
    assert await state.reset("never-opened") is False


# -- two replicas on one Redis --------------------------------------------------------------------


@pytest.mark.redis
async def test_replicas_count_one_keys_failures_together(new_redis_state: Callable[[], RedisState]) -> None:
    one, two = new_redis_state(), new_redis_state()
    assert await backoff_trip(one, "hk", THREE_IN_30) is None
    assert await backoff_trip(two, "hk", THREE_IN_30) is None
    record = await backoff_trip(one, "hk", THREE_IN_30)  # the third failure, whichever replica saw it
    assert record is not None and record.opened
    assert await two.breakers(["hk"]) == {"hk": record}


@pytest.mark.redis
async def test_concurrent_failures_on_two_replicas_open_the_key_exactly_once(
    new_redis_state: Callable[[], RedisState],
) -> None:
    one, two = new_redis_state(), new_redis_state()
    tuning = BreakerTuning(threshold=4, window_s=30)
    results = await asyncio.gather(*(backoff_trip(one if i % 2 else two, "hk", tuning) for i in range(12)))
    openings = [r for r in results if r is not None and r.opened]
    assert len(openings) == 1  # the fourth failure opened it; the later ones were sent before that
    assert openings[0].failures == 1
    assert sum(r is None for r in results) == 3  # the three failures below the threshold
