"""Fixtures for the shared-state suite: ``state`` runs each contract test on MemoryState and on the real
Redis at ``RELAY_TEST_REDIS_URL`` (never a mock). Each Redis test gets its own key prefix and deletes
its keys afterwards, because the server is shared with other suites. A missing Redis skips those tests,
or fails them under ``CI=true``.
"""

from __future__ import annotations

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


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[SharedState]:
    """Each implementation of the seam in turn."""
    if request.param == "memory":
        memory = MemoryState()
        yield memory
        await memory.close()
        return
    async with redis_namespace() as (prefix, _admin):
        redis_state = RedisState(REDIS_URL, prefix=prefix)
        try:
            yield redis_state
        finally:
            await redis_state.close()


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
