"""Redis-only behaviour: replicas share one truth, scripts survive a flush, keys expire, errors map.

Two ``RedisState`` instances on one prefix stand for two replicas (separate connection pools).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest
from redis.asyncio import Redis

from relay.state import LimitCheck, RedisState, StateUnavailable
from relay.state.scripts import Script
from tests.fixtures.databases import REDIS_URL

pytestmark = pytest.mark.redis

Replicas = Callable[[], RedisState]


async def test_replicas_together_admit_exactly_the_limit(new_redis_state: Replicas) -> None:
    one, two = new_redis_state(), new_redis_state()
    checks = [LimitCheck("policy:requests", "window", 20, 1_000_000, 1)]
    verdicts = await asyncio.gather(
        *((one if i % 2 else two).reserve(checks, uuid.uuid4().hex, 30) for i in range(50))
    )
    assert sum(v.admitted for v in verdicts) == 20


async def test_replicas_share_concurrency_slots(new_redis_state: Replicas) -> None:
    one, two = new_redis_state(), new_redis_state()
    checks = [LimitCheck("policy:concurrency", "concurrency", 7)]
    leases = [uuid.uuid4().hex for _ in range(50)]
    verdicts = await asyncio.gather(
        *((one if i % 2 else two).reserve(checks, lease, 30) for i, lease in enumerate(leases))
    )
    admitted = [lease for lease, verdict in zip(leases, verdicts, strict=True) if verdict.admitted]
    assert len(admitted) == 7
    await one.commit([], ["policy:concurrency"], admitted[0])
    assert (await two.reserve(checks, "late", 30)).admitted


async def test_replicas_share_breakers_and_counters(new_redis_state: Replicas) -> None:
    one, two = new_redis_state(), new_redis_state()
    record = await one.trip("key-1", reason="upstream_5xx", version="v1")
    assert await two.breakers(["key-1"]) == {"key-1": record}
    assert (await two.trip("key-1", reason="upstream_5xx", version="v1")).failures == 2
    assert [await one.next_counter("rr"), await two.next_counter("rr")] == [1, 2]
    await one.touch("lru", "a", 2.0)
    await two.touch("lru", "b", 1.0)
    assert await two.least_recent("lru", ["a", "b"]) == ["b", "a"]
    await two.reset("key-1")
    assert await one.pick_state(["key-1"], "rr") == ({}, 3)


async def test_scripts_survive_script_flush(
    new_redis_state: Replicas, redis_admin: tuple[str, Redis]
) -> None:
    _prefix, admin = redis_admin
    state = new_redis_state()
    check = [LimitCheck("w", "window", 3, 1_000_000, 1)]
    assert (await state.reserve(check, "a", 30)).admitted
    await admin.script_flush()  # what a Redis restart does to the script cache
    assert (await state.reserve(check, "b", 30)).admitted
    await admin.script_flush()
    await state.commit([("w", 1_000_000, 1)], [], "b")
    assert not (await state.reserve(check, "c", 30)).admitted
    await admin.script_flush()
    assert (await state.trip("k", reason="r", version="v")).failures == 1
    await admin.script_flush()
    assert set((await state.pick_state(["k"], "rr"))[0]) == {"k"}


class _FlushedAgainAfterLoad(Redis):
    """A real client whose next ``SCRIPT LOAD`` is followed by a real ``SCRIPT FLUSH``: what a second
    flush (or a second restart) landing between a reload and its retry does to the script cache."""

    flushes_left = 1

    async def script_load(self, script):  # type: ignore[no-untyped-def, override]
        sha = await super().script_load(script)
        if self.flushes_left:
            self.flushes_left -= 1
            await self.script_flush()
        return sha


async def test_a_script_outlasts_a_flush_between_its_reload_and_its_retry(
    redis_admin: tuple[str, Redis],
) -> None:
    """NOSCRIPT means the script did not run: ``Script`` loads and tries again (redis-py's own retry is
    once, and a second flush then fails the call)."""
    prefix, admin = redis_admin
    client = _FlushedAgainAfterLoad.from_url(REDIS_URL)
    try:
        script = Script(client, "return redis.call('INCR', KEYS[1])")
        await admin.script_flush()
        assert await script(keys=[prefix + "flushes"]) == 1
        assert client.flushes_left == 0  # the flush after the reload did happen
        assert await script(keys=[prefix + "flushes"]) == 2  # and the key was incremented once per call
    finally:
        await client.aclose()


async def test_every_key_is_prefixed_and_expires(
    new_redis_state: Replicas, redis_admin: tuple[str, Redis]
) -> None:
    prefix, admin = redis_admin
    state = new_redis_state()
    checks = [LimitCheck("req", "window", 5, 60, 1), LimitCheck("conc", "concurrency", 5)]
    assert (await state.reserve(checks, "lease", 30)).admitted
    await state.trip("temp", reason="upstream_5xx", version="v1", retry_after=20)
    await state.trip("auth", reason="upstream_auth_failed", version="v1", permanent=True)
    ttl = {key.removeprefix(prefix): await admin.pttl(key) async for key in admin.scan_iter(f"{prefix}*")}
    window_key = next(key for key in ttl if key.startswith("rl:req:60:"))
    assert 0 < ttl[window_key] <= 61_000
    assert 30_000 <= ttl["cc:conc"] <= 31_000
    assert 619_000 <= ttl["br:temp"] <= 620_000
    assert 7 * 86_400_000 - 5_000 <= ttl["br:auth"] <= 7 * 86_400_000
    assert len(ttl) == 4


async def test_prefixes_isolate_deployments(redis_admin: tuple[str, Redis]) -> None:
    prefix, _admin = redis_admin
    ours, theirs = RedisState(REDIS_URL, prefix=prefix + "a:"), RedisState(REDIS_URL, prefix=prefix + "b:")
    try:
        assert await ours.next_counter("rr") == 1
        assert await theirs.next_counter("rr") == 1
    finally:
        await ours.close()
        await theirs.close()


async def test_an_unreachable_redis_maps_to_state_unavailable() -> None:
    state = RedisState("redis://127.0.0.1:1/0", timeout_s=0.5)
    try:
        assert await state.ping() is False
        with pytest.raises(StateUnavailable) as caught:
            await state.reserve([LimitCheck("k", "window", 1, 60, 1)], "a", 30)
        assert caught.value.status == 503
        assert caught.value.code == "state_unavailable"
        with pytest.raises(StateUnavailable):
            await state.breakers(["k"])
    finally:
        await state.close()
