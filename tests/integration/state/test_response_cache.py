"""Contract: the response cache's stores (SPEC §19), one suite run on the in-process LRU and on the
real Redis at ``RELAY_TEST_REDIS_URL`` (its own key prefix per test). Then what only one store has:
the LRU's byte bound, and Redis shared by two clients (two replicas) and answering a down server with
``StateUnavailable`` (the request step turns that into a miss)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from relay.state import StateUnavailable
from relay.state.response_cache import MemoryResponseCache, RedisResponseCache, ResponseCache
from tests.fixtures.databases import REDIS_URL
from tests.fixtures.shared_state import redis_namespace

MAX_ENTRY = 4096


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def cache(request: pytest.FixtureRequest) -> AsyncIterator[ResponseCache]:
    if request.param == "memory":
        memory = MemoryResponseCache(max_bytes=1 << 20, max_entry_bytes=MAX_ENTRY)
        yield memory
        await memory.close()
        return
    async with redis_namespace() as (prefix, _admin):
        redis = RedisResponseCache(REDIS_URL, prefix=prefix, max_entry_bytes=MAX_ENTRY)
        yield redis
        await redis.close()


async def test_a_stored_entry_is_read_back_and_an_unknown_key_is_none(cache: ResponseCache) -> None:
    assert await cache.get("pol_a", "k1") is None
    assert await cache.put("pol_a", "k1", b'{"answer": 1}', 60) is True
    assert await cache.get("pol_a", "k1") == b'{"answer": 1}'
    assert await cache.get("pol_a", "k2") is None


async def test_a_namespace_is_part_of_the_key(cache: ResponseCache) -> None:
    await cache.put("pol_a", "k", b"a", 60)
    assert await cache.get("pol_b", "k") is None
    await cache.put("pol_b", "k", b"b", 60)
    assert (await cache.get("pol_a", "k"), await cache.get("pol_b", "k")) == (b"a", b"b")


async def test_a_put_replaces_the_entry(cache: ResponseCache) -> None:
    await cache.put("pol_a", "k", b"first", 60)
    await cache.put("pol_a", "k", b"second", 60)
    assert await cache.get("pol_a", "k") == b"second"


async def test_an_entry_expires_after_its_ttl(cache: ResponseCache) -> None:
    await cache.put("pol_a", "short", b"x", 1)
    await cache.put("pol_a", "long", b"y", 600)
    assert await cache.get("pol_a", "short") == b"x"

    deadline = time.monotonic() + 15  # a bound that fails a broken store, not a speed check
    while await cache.get("pol_a", "short") is not None:
        assert time.monotonic() < deadline, "the 1 s entry never expired"
        await asyncio.sleep(0.1)
    assert await cache.get("pol_a", "long") == b"y"


async def test_an_entry_past_the_entry_bound_is_not_stored(cache: ResponseCache) -> None:
    assert await cache.put("pol_a", "big", b"x" * (MAX_ENTRY + 1), 60) is False
    assert await cache.get("pol_a", "big") is None
    assert await cache.put("pol_a", "fits", b"x" * MAX_ENTRY, 60) is True
    assert await cache.get("pol_a", "fits") == b"x" * MAX_ENTRY


async def test_purge_empties_one_namespace_only(cache: ResponseCache) -> None:
    for i in range(5):
        await cache.put("pol_a", f"k{i}", b"a", 60)
    await cache.put("pol_b", "k0", b"b", 60)
    # A namespace that is a prefix of another, or holds glob characters, purges only itself.
    await cache.put("pol_a*", "k0", b"c", 60)
    await cache.put("pol_", "k0", b"d", 60)
    assert await cache.purge("pol_a") == 5
    assert [await cache.get("pol_a", f"k{i}") for i in range(5)] == [None] * 5
    assert await cache.get("pol_b", "k0") == b"b"
    assert await cache.get("pol_a*", "k0") == b"c"
    assert await cache.get("pol_", "k0") == b"d"
    assert await cache.purge("pol_a") == 0


async def test_the_lru_keeps_its_bytes_under_the_bound_least_recently_used_out_first() -> None:
    entry = b"x" * 100
    weight = len("pol") + len("k0") + len(entry)
    memory = MemoryResponseCache(max_bytes=weight * 3, max_entry_bytes=1000)
    for i in range(3):
        await memory.put("pol", f"k{i}", entry, 60)
    assert await memory.get("pol", "k0") == entry  # k0 is now the most recently used
    await memory.put("pol", "k3", entry, 60)
    assert memory.size <= memory.max_bytes
    assert await memory.get("pol", "k1") is None  # the least recently used went
    assert [await memory.get("pol", k) for k in ("k0", "k2", "k3")] == [entry] * 3


@pytest.mark.redis
async def test_two_redis_clients_on_one_prefix_share_entries() -> None:
    async with redis_namespace() as (prefix, _admin):
        one = RedisResponseCache(REDIS_URL, prefix=prefix)
        two = RedisResponseCache(REDIS_URL, prefix=prefix)
        try:
            await one.put("pol", "k", b"shared", 60)
            assert await two.get("pol", "k") == b"shared"
            assert await two.purge("pol") == 1
            assert await one.get("pol", "k") is None
        finally:
            await one.close()
            await two.close()


async def test_a_redis_that_does_not_answer_raises_state_unavailable() -> None:
    # A port nothing listens on (the discard port on loopback: refused at once).
    down = RedisResponseCache("redis://127.0.0.1:9/0", prefix=f"t-{uuid.uuid4().hex}:", timeout_s=0.5)
    try:
        with pytest.raises(StateUnavailable):
            await down.get("pol", "k")
        with pytest.raises(StateUnavailable):
            await down.put("pol", "k", b"v", 60)
        with pytest.raises(StateUnavailable):
            await down.purge("pol")
    finally:
        await down.close()


@pytest.mark.redis
async def test_a_burst_past_the_pool_waits_for_a_connection_instead_of_failing() -> None:
    async with redis_namespace() as (prefix, _admin):
        small = RedisResponseCache(REDIS_URL, prefix=prefix, max_connections=2)
        try:
            await small.put("pol", "k", b"v", 60)
            answers = await asyncio.gather(*(small.get("pol", "k") for _ in range(50)))
            assert answers == [b"v"] * 50
        finally:
            await small.close()
