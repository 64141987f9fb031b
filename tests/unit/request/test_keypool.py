"""KeyPool and classify (SPEC §6) over real shared state: the failure table, the three selection
strategies, breaker flows (auth until the key is edited, long 429 for Retry-After, 5xx backoff then
half-open, success closes), the failover bound, no healthy keys, round trips and failing open.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from email.utils import formatdate

import pytest

from relay.errors import Unavailable
from relay.request.keypool import Failure, KeyPool, classify
from relay.snapshot import HostKey
from relay.state import RedisState, SharedState
from tests.unit.request.limit_records import CountingState, host_keys, policy

PRIORITIZED = policy(key_selection="prioritized")
ROUND_ROBIN = policy(key_selection="round_robin")
LRU = policy(key_selection="least_recently_used")


def names(keys: list[HostKey]) -> list[str]:
    return [key.name for key in keys]


def http_date(seconds_from_now: float) -> str:
    return formatdate(time.time() + seconds_from_now, usegmt=True)


# -- classify --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retry_after", "kind"),
    [
        (None, None, "connection"),
        (401, None, "auth"),
        (403, "30", "auth"),
        (429, "0", "rate_limited_short"),
        (429, "5", "rate_limited_short"),
        (429, "2.5", "rate_limited_short"),
        (429, "6", "rate_limited"),
        (429, "3600", "rate_limited"),
        (429, None, "rate_limited"),
        (429, "soon", "rate_limited"),
        (500, None, "server"),
        (502, None, "server"),
        (503, "1", "server"),
        (504, None, "server"),
        (599, None, "server"),
        (200, None, None),
        (201, None, None),
        (400, None, None),
        (404, None, None),
        (408, None, None),
        (409, None, None),
        (413, None, None),
        (422, None, None),
    ],
)
def test_classify_table(status: int | None, retry_after: str | None, kind: str | None) -> None:
    failure = classify(status, retry_after)
    if kind is None:
        assert failure is None
        return
    assert failure is not None and failure.kind == kind
    assert failure.status == (0 if status is None else status)
    assert failure.trips is (kind != "rate_limited_short")


def test_classify_retry_after_values() -> None:
    assert classify(429, "3") == Failure("rate_limited_short", 429, 3.0)
    assert classify(429, "120") == Failure("rate_limited", 429, 120.0)
    assert classify(429, None) == Failure("rate_limited", 429, None)  # no hint: backoff ladder
    assert classify(500, None) == Failure("server", 500, None)
    assert classify(None, None) == Failure("connection", 0, None)


def test_classify_retry_after_as_http_date() -> None:
    later = classify(429, http_date(120))
    assert later is not None and later.kind == "rate_limited"
    assert later.retry_after == pytest.approx(120, abs=2)
    soon = classify(429, http_date(2))
    assert soon is not None and soon.kind == "rate_limited_short"
    past = classify(429, "Wed, 21 Oct 2015 07:28:00 GMT")
    assert past == Failure("rate_limited_short", 429, 0.0)


# -- selection -------------------------------------------------------------------------------------


async def test_prioritized_is_pool_order_capped_at_three(state: SharedState) -> None:
    pool = KeyPool(state)
    assert names(await pool.candidates(PRIORITIZED, host_keys(5), "openai")) == ["key-1", "key-2", "key-3"]
    assert names(await pool.candidates(PRIORITIZED, host_keys(2), "openai")) == ["key-1", "key-2"]
    assert names(await pool.candidates(PRIORITIZED, host_keys(1), "openai")) == ["key-1"]


async def test_round_robin_rotates_across_calls(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(4)
    firsts = [(await pool.candidates(ROUND_ROBIN, keys, "openai"))[0].name for _ in range(5)]
    assert firsts == ["key-1", "key-2", "key-3", "key-4", "key-1"]
    assert names(await pool.candidates(ROUND_ROBIN, keys, "openai")) == ["key-2", "key-3", "key-4"]


async def test_round_robin_rotates_over_eligible_keys_only(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(3)
    await pool.failed(keys[1], Failure("auth", 401, None))
    firsts = [(await pool.candidates(ROUND_ROBIN, keys, "openai"))[0].name for _ in range(4)]
    assert firsts == ["key-1", "key-3", "key-1", "key-3"]


@pytest.mark.redis
async def test_round_robin_counter_is_shared_by_replicas(new_redis_state: Callable[[], RedisState]) -> None:
    one, two, keys = KeyPool(new_redis_state()), KeyPool(new_redis_state()), host_keys(3)
    firsts = [(await pool.candidates(ROUND_ROBIN, keys, "openai"))[0].name for pool in (one, two, one, two)]
    assert firsts == ["key-1", "key-2", "key-3", "key-1"]


async def test_least_recently_used_picks_the_oldest(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(3)
    assert names(await pool.candidates(LRU, keys, "openai")) == ["key-1", "key-2", "key-3"]  # none used
    await pool.succeeded(keys[0], LRU)
    assert names(await pool.candidates(LRU, keys, "openai")) == ["key-2", "key-3", "key-1"]
    await asyncio.sleep(0.01)
    await pool.succeeded(keys[1], LRU)
    await asyncio.sleep(0.01)
    await pool.succeeded(keys[2], LRU)
    assert names(await pool.candidates(LRU, keys, "openai")) == ["key-1", "key-2", "key-3"]
    await asyncio.sleep(0.01)
    await pool.succeeded(keys[0], LRU)
    assert names(await pool.candidates(LRU, keys, "openai")) == ["key-2", "key-3", "key-1"]


async def test_round_trips_per_strategy() -> None:
    counting = CountingState()
    pool, keys = KeyPool(counting.as_state()), host_keys(3)
    await pool.candidates(PRIORITIZED, keys, "openai")
    assert counting.calls == {"breakers": 1}
    counting.calls.clear()
    await pool.candidates(ROUND_ROBIN, keys, "openai")
    assert counting.calls == {"pick_state": 1}
    counting.calls.clear()
    await pool.candidates(LRU, keys, "openai")
    assert counting.calls == {"breakers": 1, "least_recent": 1}
    counting.calls.clear()
    # A success on a key without a breaker record costs nothing (prioritized) or one touch (LRU).
    await pool.succeeded(keys[0], PRIORITIZED)
    assert counting.calls == {}
    await pool.succeeded(keys[0], LRU)
    assert counting.calls == {"touch": 1}
    counting.calls.clear()
    # A short 429 trips nothing and sends nothing.
    await pool.failed(keys[0], Failure("rate_limited_short", 429, 1.0))
    assert counting.calls == {}


# -- breakers --------------------------------------------------------------------------------------


async def test_auth_failure_skips_the_key_until_its_version_changes(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(3)
    failure = classify(401, None)
    assert failure is not None
    await pool.failed(keys[0], failure)
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-2", "key-3"]
    record = (await state.breakers([keys[0].id]))[keys[0].id]
    assert (record.open_until, record.reason) == (None, "upstream_auth_failed")
    # A later 5xx on the same version does not shorten the auth failure.
    await pool.failed(keys[0], Failure("server", 500, None))
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-2", "key-3"]
    edited = [dataclasses.replace(keys[0], version="v2"), *keys[1:]]
    assert names(await pool.candidates(PRIORITIZED, edited, "openai")) == ["key-1", "key-2", "key-3"]


async def test_long_429_skips_the_key_until_retry_after_passes(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(2)
    await pool.failed(keys[0], Failure("rate_limited", 429, 0.5))
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-2"]
    await asyncio.sleep(0.6)
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-1", "key-2"]


async def test_short_429_does_not_trip(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(2)
    failure = classify(429, "2")
    assert failure is not None and not failure.trips
    await pool.failed(keys[0], failure)
    assert await state.breakers([keys[0].id]) == {}
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-1", "key-2"]


@pytest.mark.parametrize("status", [500, None])
async def test_server_error_backs_off_then_half_opens_and_success_closes(
    state: SharedState, status: int | None
) -> None:
    pool, keys = KeyPool(state), host_keys(3)
    failure = classify(status, None)
    assert failure is not None
    await pool.failed(keys[0], failure)
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-2", "key-3"]
    await asyncio.sleep(1.1)  # the first backoff is 1 s: now half-open, tried again
    selection = await pool.select(PRIORITIZED, keys, "openai")
    assert names(selection.keys) == ["key-1", "key-2", "key-3"]
    assert keys[0].id in await state.breakers([keys[0].id])
    assert await pool.begin(keys[0], selection)  # this request is the probe
    await pool.succeeded(keys[0], PRIORITIZED, selection.seen(keys[0]))
    assert await state.breakers([keys[0].id]) == {}  # closed, history forgotten
    await pool.failed(keys[0], failure)
    record = (await state.breakers([keys[0].id]))[keys[0].id]
    assert record.failures == 1  # the ladder restarts at 1 s


async def test_success_resets_a_record_seen_by_another_pool(state: SharedState) -> None:
    tripper, other, keys = KeyPool(state), KeyPool(state), host_keys(2)
    await tripper.failed(keys[0], Failure("rate_limited", 429, 0.2))
    await asyncio.sleep(0.3)
    selection = await other.select(PRIORITIZED, keys, "openai")
    assert names(selection.keys)[0] == "key-1"  # half-open
    assert await other.begin(keys[0], selection)
    await other.succeeded(keys[0], PRIORITIZED, selection.seen(keys[0]))
    assert await state.breakers([keys[0].id]) == {}


async def test_every_key_open_is_no_healthy_keys(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(2)
    await pool.failed(keys[0], Failure("auth", 403, None))
    await pool.failed(keys[1], Failure("server", 503, None))
    with pytest.raises(Unavailable) as refused:
        await pool.candidates(ROUND_ROBIN, keys, "openai")
    assert refused.value.message == 'no healthy keys for host "openai"'
    assert (refused.value.status, refused.value.code) == (503, "no_healthy_keys")


async def test_open_keys_do_not_count_toward_the_three(state: SharedState) -> None:
    pool, keys = KeyPool(state), host_keys(5)
    await pool.failed(keys[0], Failure("server", 500, None))
    await pool.failed(keys[2], Failure("auth", 401, None))
    assert names(await pool.candidates(PRIORITIZED, keys, "openai")) == ["key-2", "key-4", "key-5"]


async def test_state_down_fails_open_in_pool_order(caplog: pytest.LogCaptureFixture) -> None:
    down = RedisState("redis://127.0.0.1:1/0", timeout_s=0.5)
    pool, keys = KeyPool(down), host_keys(4)
    try:
        with caplog.at_level(logging.WARNING, logger="relay.keypool"):
            for strategy in (PRIORITIZED, ROUND_ROBIN, LRU):
                assert names(await pool.candidates(strategy, keys, "openai")) == ["key-1", "key-2", "key-3"]
            await pool.failed(keys[0], Failure("server", 500, None))  # never raises
            await pool.succeeded(keys[0], LRU)
    finally:
        await down.close()
    warnings = [r for r in caplog.records if r.name == "relay.keypool"]
    assert len(warnings) == 1 and "unavailable" in warnings[0].getMessage()
