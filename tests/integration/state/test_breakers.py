"""Contract: per-host-key circuit breakers (SPEC §6), identical on MemoryState and RedisState.

``open_until`` is on the store's clock; Redis runs on this host, so comparing it with ``time.time()``
within a tolerance is fair.
"""

from __future__ import annotations

import time

import pytest

from relay.state import BreakerRecord, SharedState, backoff_s

TOLERANCE_S = 0.5


def opens_in(record: BreakerRecord) -> float:
    assert record.open_until is not None
    return record.open_until - time.time()


def test_backoff_ladder() -> None:
    assert [backoff_s(n) for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert backoff_s(10_000) == 60


async def test_no_records_for_unknown_or_closed_keys(state: SharedState) -> None:
    assert await state.breakers([]) == {}
    assert await state.breakers(["k1", "k2"]) == {}
    await state.reset("k1")  # closing a closed breaker is a no-op
    assert await state.breakers(["k1"]) == {}


async def test_backoff_trips_climb_1_2_4_to_a_60_second_cap(state: SharedState) -> None:
    for failures, expected in enumerate([1, 2, 4, 8, 16, 32, 60, 60], start=1):
        record = await state.trip("k", reason="upstream_5xx", version="v1")
        assert (record.failures, record.reason, record.version) == (failures, "upstream_5xx", "v1")
        assert opens_in(record) == pytest.approx(expected, abs=TOLERANCE_S)
    assert await state.breakers(["k", "other"]) == {"k": record}


async def test_retry_after_trip_keeps_the_failure_count(state: SharedState) -> None:
    await state.trip("k", reason="upstream_5xx", version="v1")
    await state.trip("k", reason="upstream_5xx", version="v1")
    record = await state.trip("k", reason="upstream_429", version="v1", retry_after=30)
    assert (record.failures, record.reason) == (2, "upstream_429")
    assert opens_in(record) == pytest.approx(30, abs=TOLERANCE_S)
    fresh = await state.trip("fresh", reason="upstream_429", version="v1", retry_after=7.5)
    assert fresh.failures == 0
    assert opens_in(fresh) == pytest.approx(7.5, abs=TOLERANCE_S)
    # The next backoff trip continues the ladder from the kept count.
    assert opens_in(await state.trip("k", reason="upstream_5xx", version="v1")) == pytest.approx(4, abs=0.5)


async def test_permanent_trip_is_open_until_the_version_changes(state: SharedState) -> None:
    record = await state.trip("k", reason="upstream_auth_failed", version="v7", permanent=True)
    assert record is not None and record.trip_id > 0
    assert record == BreakerRecord(None, 0, "upstream_auth_failed", "v7", record.trip_id)
    assert await state.breakers(["k"]) == {"k": record}


async def test_a_new_version_starts_a_clean_history(state: SharedState) -> None:
    for _ in range(3):
        await state.trip("k", reason="upstream_5xx", version="v1")
    record = await state.trip("k", reason="upstream_5xx", version="v2")
    assert (record.failures, record.version) == (1, "v2")
    assert opens_in(record) == pytest.approx(1, abs=TOLERANCE_S)


async def test_reset_closes_the_breaker_and_forgets_failures(state: SharedState) -> None:
    await state.trip("k", reason="upstream_5xx", version="v1")
    await state.trip("k2", reason="upstream_auth_failed", version="v1", permanent=True)
    await state.reset("k")
    assert set(await state.breakers(["k", "k2"])) == {"k2"}
    assert (await state.trip("k", reason="upstream_5xx", version="v1")).failures == 1


async def test_breaker_fields_round_trip_any_text(state: SharedState) -> None:
    reason, version = 'odd "reason" | with\nnewline/ü', "2024-01-01T00:00:00+00:00|7"
    record = await state.trip("k:with:colons", reason=reason, version=version, permanent=True)
    assert (await state.breakers(["k:with:colons"]))["k:with:colons"] == record
    assert (record.reason, record.version) == (reason, version)


async def test_a_permanent_trip_is_not_shortened_by_later_trips(state: SharedState) -> None:
    permanent = await state.trip("k", reason="upstream_auth_failed", version="v1", permanent=True)
    assert await state.trip("k", reason="upstream_5xx", version="v1") == permanent
    assert await state.trip("k", reason="upstream_429", version="v1", retry_after=30) == permanent
    assert await state.breakers(["k"]) == {"k": permanent}
    edited = await state.trip("k", reason="upstream_5xx", version="v2")
    assert (edited.open_until is not None, edited.failures) == (True, 1)
