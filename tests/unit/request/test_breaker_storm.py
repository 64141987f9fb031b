"""Breakers count trips, not failed requests (SPEC §6), on MemoryState and on the real Redis.

A storm: N requests choose the same closed key at once and all fail. The key opens once, for 1 s
(step 1), whatever N is. When its time is up, N requests arrive again: exactly one takes the half-open
probe, the others skip the key. The probe fails: 2 s (step 2); again: 4 s. A probe that succeeds
closes the key and the next storm opens it for 1 s again. Each request runs the pipeline's own steps
(``select`` → ``begin`` → ``failed``/``succeeded`` with the opening it saw).

The open duration of each opening is read from the record itself (``open_until`` minus the moment
it was written, ``trip_id``, both on the store's clock), so it is exact and needs no wall-clock
assertion; the test only waits for each opening to end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from relay.request.keypool import Failure, KeyPool
from relay.snapshot import HostKey
from relay.state import BreakerRecord, SharedState
from tests.fixtures.shared_state import each_state
from tests.unit.request.limit_records import host_keys, policy

PRIORITIZED = policy(key_selection="prioritized")
SERVER_ERROR = Failure("server", 503, None)
N = 64


def open_for(record: BreakerRecord) -> float:
    assert record.open_until is not None
    return round(record.open_until - record.trip_id / 1000, 2)


async def storm(pools: list[KeyPool], keys: list[HostKey], *, outcome: str) -> tuple[int, int]:
    """N concurrent requests over ``pools`` (replicas); each probes/sends to the first key it may use,
    which ``outcome``s ("fail" or "ok"). Returns (requests that sent to key 1, that skipped it)."""
    gate = asyncio.Event()
    sent = skipped = chosen = 0

    async def one(pool: KeyPool) -> None:
        nonlocal sent, skipped, chosen
        selection = await pool.select(PRIORITIZED, keys, "h")
        chosen += 1
        if chosen == N:
            gate.set()
        await gate.wait()  # every request has chosen before any of them reports back
        key = selection.keys[0]
        if key.id != keys[0].id or not await pool.begin(key, selection):
            skipped += 1
            return
        sent += 1
        await asyncio.sleep(0)
        if outcome == "fail":
            await pool.failed(key, SERVER_ERROR, selection.seen(key))
        else:
            await pool.succeeded(key, PRIORITIZED, selection.seen(key))

    await asyncio.gather(*(one(pools[i % len(pools)]) for i in range(N)))
    return sent, skipped


async def record_of(state: SharedState, key: HostKey) -> BreakerRecord:
    return (await state.breakers([key.id]))[key.id]


async def wait_half_open(record: BreakerRecord) -> None:
    assert record.open_until is not None
    await asyncio.sleep(max(0.0, record.open_until - time.time()) + 0.05)


@pytest.fixture(params=["memory", pytest.param("redis-mirrored", marks=pytest.mark.redis)])
async def storm_state(request: pytest.FixtureRequest) -> AsyncIterator[SharedState]:
    """Memory and a started RedisState (as ``relay serve`` runs it): the storm takes ~8 s per store."""
    async with each_state(request.param) as chosen:
        yield chosen


async def test_a_storm_opens_once_then_each_failed_probe_doubles(storm_state: SharedState) -> None:
    state = storm_state
    keys = host_keys(2)
    pools = [KeyPool(state), KeyPool(state), KeyPool(state)]  # three replicas on one store
    durations = []

    sent, skipped = await storm(pools, keys, outcome="fail")
    assert (sent, skipped) == (N, 0)  # all chose the closed key, all failed
    record = await record_of(state, keys[0])
    assert record.failures == 1, record
    durations.append(open_for(record))

    for step in (2, 3):
        await wait_half_open(record)
        sent, skipped = await storm(pools, keys, outcome="fail")
        assert (sent, skipped) == (1, N - 1), "exactly one half-open probe per opening"
        record = await record_of(state, keys[0])
        assert record.failures == step, record
        durations.append(open_for(record))

    await wait_half_open(record)
    sent, skipped = await storm(pools, keys, outcome="ok")
    assert (sent, skipped) == (1, N - 1)
    assert await state.breakers([keys[0].id]) == {}, "the probe's success closes the key"
    sent, _ = await storm(pools, keys, outcome="fail")
    assert sent == N
    record = await record_of(state, keys[0])
    durations.append(open_for(record))
    print(f"\nbreaker storm of {N} concurrent failures, open durations (s): {durations}")
    assert durations == [1.0, 2.0, 4.0, 1.0]
    assert record.failures == 1


async def test_a_late_success_of_an_earlier_request_does_not_close_a_newer_opening(
    state: SharedState,
) -> None:
    keys = host_keys(1)
    pool = KeyPool(state)
    early = await pool.select(PRIORITIZED, keys, "h")  # chose the key while it was closed
    late = await pool.select(PRIORITIZED, keys, "h")
    await pool.failed(keys[0], SERVER_ERROR, early.seen(keys[0]))
    await pool.succeeded(keys[0], PRIORITIZED, late.seen(keys[0]))  # sent before it opened
    assert (await record_of(state, keys[0])).failures == 1
    await pool.failed(keys[0], SERVER_ERROR, late.seen(keys[0]))  # and its failure counts for nothing
    assert (await record_of(state, keys[0])).failures == 1


async def test_a_probe_hold_expires(state: SharedState) -> None:
    """A probe whose process died blocks the key for ``probe_hold_s``, not for good."""
    keys = host_keys(1)
    record = await state.trip(keys[0].id, reason="upstream_5xx", version="v1", seen=0)
    assert record is not None
    await wait_half_open(record)
    assert await state.claim_probe(keys[0].id, record.trip_id, 0.3)
    assert not await state.claim_probe(keys[0].id, record.trip_id, 0.3)
    assert not await state.claim_probe(keys[0].id, record.trip_id + 1, 0.3)  # another opening
    await asyncio.sleep(0.4)
    assert await state.claim_probe(keys[0].id, record.trip_id, 0.3)


async def test_a_probe_that_neither_trips_nor_closes_gives_the_probe_back(state: SharedState) -> None:
    """A half-open probe answered by a short 429 (no trip, SPEC §6) frees the key for the next probe at
    once, instead of holding it for the probe's whole deadline; a probe of another opening is untouched."""
    keys = host_keys(1)
    pool = KeyPool(state, probe_hold_s=300)
    record = await state.trip(keys[0].id, reason="upstream_5xx", version="v1", seen=0)
    assert record is not None
    await wait_half_open(record)
    selection = await pool.select(PRIORITIZED, keys, "h")
    assert await pool.begin(keys[0], selection)
    assert not await state.claim_probe(keys[0].id, record.trip_id, 300)  # held by the probe
    await pool.failed(keys[0], Failure("rate_limited_short", 429, 2.0), selection.seen(keys[0]))
    assert await state.claim_probe(keys[0].id, record.trip_id, 300)  # given back: the next may probe
    await state.release_probe(keys[0].id, record.trip_id + 1)  # another opening's: nothing happens
    assert not await state.claim_probe(keys[0].id, record.trip_id, 300)


async def test_every_half_open_key_probed_elsewhere_is_no_healthy_keys(state: SharedState) -> None:
    """SPEC §6: the others "fail over or get ``no_healthy_keys``" — here, nothing else to fail over to."""
    keys = host_keys(1)
    first, second = KeyPool(state), KeyPool(state)
    await first.failed(keys[0], SERVER_ERROR, 0)
    await wait_half_open(await record_of(state, keys[0]))
    mine, theirs = (await first.select(PRIORITIZED, keys, "h"), await second.select(PRIORITIZED, keys, "h"))
    assert await first.begin(keys[0], mine)
    assert not await second.begin(keys[0], theirs)
    assert not await second.begin(keys[0], theirs)  # asked again: answered locally, no round trip


@pytest.mark.parametrize("retry_after", [30.0])
async def test_a_long_429_never_shortens_an_opening(state: SharedState, retry_after: float) -> None:
    keys = host_keys(1)
    await state.trip(keys[0].id, reason="upstream_rate_limited", version="v1", retry_after=retry_after)
    record = await state.trip(keys[0].id, reason="upstream_rate_limited", version="v1", retry_after=6)
    assert record is not None and record.open_until is not None
    assert record.open_until - time.time() > 20
