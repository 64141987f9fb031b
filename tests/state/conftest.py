"""Fixtures for the shared-state suite: ``state`` runs each contract test on MemoryState and on the real
Redis at ``RELAY_TEST_REDIS_URL`` (never a mock). Each Redis test gets its own key prefix and deletes
its keys afterwards, because the server is shared with other suites. A missing Redis skips those tests,
or fails them under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from redis.asyncio import Redis

from relay.state import MemoryState, RedisState, SharedState
from tests.fixtures.databases import REDIS_URL, missing_service


@asynccontextmanager
async def redis_namespace() -> AsyncIterator[tuple[str, Redis]]:
    """A fresh ``relay-test-<uuid>:`` prefix and an admin client; every key under it is removed after."""
    admin = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        await admin.ping()
    except Exception as exc:
        await admin.aclose()
        missing_service(f"Redis at {REDIS_URL}", exc)
    prefix = f"relay-test-{uuid.uuid4().hex}:"
    try:
        yield prefix, admin
    finally:
        keys = [key async for key in admin.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await admin.delete(*keys)
        await admin.aclose()


async def mirroring(state: RedisState, timeout_s: float = 5.0) -> RedisState:
    """``state`` once its breaker watch is subscribed (``start`` has run): as ``relay serve`` runs it."""
    await state.start()
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not state.mirroring:
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the breaker watch did not subscribe within {timeout_s:g} s")
        await asyncio.sleep(0.01)
    return state


STATE_PARAMS = [
    "memory",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-mirrored", marks=pytest.mark.redis),
]


@asynccontextmanager
async def each_state(kind: str) -> AsyncIterator[SharedState]:
    """``memory``; ``redis`` (every read a round trip); ``redis-mirrored`` (started: breaker reads
    served from the mirror while the watch holds)."""
    if kind == "memory":
        memory = MemoryState()
        yield memory
        await memory.close()
        return
    async with redis_namespace() as (prefix, _admin):
        redis_state = RedisState(REDIS_URL, prefix=prefix)
        try:
            yield await mirroring(redis_state) if kind == "redis-mirrored" else redis_state
        finally:
            await redis_state.close()


@pytest.fixture(params=STATE_PARAMS)
async def state(request: pytest.FixtureRequest) -> AsyncIterator[SharedState]:
    """Each implementation of the seam in turn."""
    async with each_state(request.param) as chosen:
        yield chosen


@pytest.fixture
async def redis_admin() -> AsyncIterator[tuple[str, Redis]]:
    """(prefix, admin client) for Redis-only tests that inspect keys."""
    async with redis_namespace() as namespace:
        yield namespace


@pytest.fixture
async def replicas(redis_admin: tuple[str, Redis]) -> AsyncIterator[Callable[[], RedisState]]:
    """Make ``RedisState`` instances on one prefix: separate pools, as separate replicas would have."""
    prefix, _admin = redis_admin
    made: list[RedisState] = []

    def make() -> RedisState:
        made.append(RedisState(REDIS_URL, prefix=prefix))
        return made[-1]

    yield make
    for instance in made:
        await instance.close()
