"""The breaker mirror (``relay.state.mirror``, ``RedisState.start``): breaker reads served from memory
while Redis notifies every change, and never a stale answer kept across a change or a broken watch.

The rules on the pure ``BreakerMirror`` (injected clock), then the real thing on the real Redis: what a
started replica asks Redis, how fast another replica's trip and reset reach it, and what happens when
its subscription is killed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from relay.state import BreakerRecord, RedisState
from relay.state.mirror import BreakerMirror
from tests.fixtures.shared_state import mirroring

OPEN = BreakerRecord(open_until=None, failures=0, reason="upstream_auth_failed", version="v1")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def live_mirror(clock: Clock | None = None) -> BreakerMirror:
    mirror = BreakerMirror(max_age_s=5.0, clock=clock or Clock())
    mirror.reset_all(live=True)
    return mirror


# -- the rules -------------------------------------------------------------------------------------


def test_a_mirror_that_is_not_live_answers_nothing_and_keeps_nothing() -> None:
    mirror = BreakerMirror()
    mirror.store(["hk_a"], {}, mirror.generation)
    assert mirror.get(["hk_a"]) is None
    mirror.reset_all(live=True)
    assert mirror.get(["hk_a"]) is None  # nothing was kept while it was off


def test_it_answers_only_when_every_key_is_known_and_closed_keys_are_absent() -> None:
    mirror = live_mirror()
    mirror.store(["hk_a", "hk_b"], {"hk_b": OPEN}, mirror.generation)
    assert mirror.get(["hk_a", "hk_b"]) == {"hk_b": OPEN}
    assert mirror.get(["hk_a"]) == {}
    assert mirror.get(["hk_a", "hk_c"]) is None  # hk_c was never read: ask Redis


def test_a_change_drops_that_key_only() -> None:
    mirror = live_mirror()
    mirror.store(["hk_a", "hk_b"], {}, mirror.generation)
    mirror.changed("hk_a")
    assert mirror.get(["hk_a"]) is None
    assert mirror.get(["hk_b"]) == {}


def test_a_read_that_crossed_a_change_is_not_kept() -> None:
    mirror = live_mirror()
    began = mirror.generation  # the read is sent …
    mirror.changed("hk_other")  # … a notification arrives before its answer …
    mirror.store(["hk_a"], {}, began)  # … so its answer may be older than the change
    assert mirror.get(["hk_a"]) is None
    mirror.store(["hk_a"], {}, mirror.generation)  # the next read is kept
    assert mirror.get(["hk_a"]) == {}


def test_a_broken_or_renewed_subscription_forgets_everything() -> None:
    mirror = live_mirror()
    mirror.store(["hk_a"], {"hk_a": OPEN}, mirror.generation)
    began = mirror.generation
    mirror.reset_all(live=False)
    assert mirror.get(["hk_a"]) is None
    mirror.store(["hk_a"], {}, began)
    mirror.reset_all(live=True)
    assert mirror.get(["hk_a"]) is None


def test_entries_age_out_even_without_a_notification() -> None:
    clock = Clock()
    mirror = live_mirror(clock)
    mirror.store(["hk_a"], {}, mirror.generation)
    clock.now += 4.9
    assert mirror.get(["hk_a"]) == {}
    clock.now += 0.2
    assert mirror.get(["hk_a"]) is None


# -- on the real Redis -----------------------------------------------------------------------------


def count_mgets(state: RedisState) -> list[int]:
    """Counts the MGETs ``state`` sends; each call still goes to the real client and Redis."""
    sent = [0]
    client: Any = state._redis
    real = client.mget

    async def counted(*args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return await real(*args, **kwargs)

    client.mget = counted
    return sent


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what}: not within {within_s:g} s")
        await asyncio.sleep(0.005)


@pytest.mark.redis
async def test_a_started_replica_reads_its_breakers_once_then_from_memory(
    new_redis_state: Callable[[], RedisState],
) -> None:
    plain, started = new_redis_state(), await mirroring(new_redis_state())
    plain_mgets, started_mgets = count_mgets(plain), count_mgets(started)
    for _ in range(5):
        assert await plain.breakers(["hk_a", "hk_b"]) == {}
        assert await started.breakers(["hk_a", "hk_b"]) == {}
    assert plain_mgets == [5]  # not started: every read is a round trip, as before
    assert started_mgets == [1]
    await started.trip("hk_a", reason="upstream_5xx", version="v1")
    assert "hk_a" in await started.breakers(["hk_a", "hk_b"])  # its own trip dropped the entry
    assert started_mgets == [2]


@pytest.mark.redis
async def test_a_trip_and_a_reset_on_one_replica_reach_the_others_mirror(
    new_redis_state: Callable[[], RedisState],
) -> None:
    tripper, watcher = new_redis_state(), await mirroring(new_redis_state())
    assert await watcher.breakers(["hk_a"]) == {}  # now mirrored as closed
    await tripper.trip("hk_a", reason="upstream_auth_failed", version="v1", permanent=True)

    async def open_seen() -> bool:
        return "hk_a" in await watcher.breakers(["hk_a"])

    # Well inside the mirror's 5 s age limit: only the notification can have dropped the entry.
    await eventually(open_seen, 1.0, "the other replica's trip")
    await tripper.reset("hk_a")

    async def closed_seen() -> bool:
        return await watcher.breakers(["hk_a"]) == {}

    await eventually(closed_seen, 1.0, "the other replica's reset")


@pytest.mark.redis
async def test_a_killed_subscription_turns_the_mirror_off_and_loses_no_change(
    new_redis_state: Callable[[], RedisState], redis_admin: tuple[str, Redis]
) -> None:
    prefix, admin = redis_admin
    tripper, watcher = new_redis_state(), await mirroring(new_redis_state())
    assert await watcher.breakers(["hk_a"]) == {}
    watch = [c for c in await admin.client_list() if c.get("name") == prefix + "breaker-watch"]
    assert len(watch) == 1, watch
    await admin.client_kill_filter(_id=watch[0]["id"])

    async def noticed() -> bool:
        return not watcher.mirroring

    await eventually(noticed, 1.0, "the watch noticing its connection closed")
    # A change made while the watch is down is never answered from the old mirror.
    await tripper.trip("hk_a", reason="upstream_5xx", version="v1")
    assert "hk_a" in await watcher.breakers(["hk_a"])

    async def back() -> bool:
        return watcher.mirroring

    await eventually(back, 5.0, "the watch resubscribing")
    await tripper.reset("hk_a")

    async def closed_seen() -> bool:
        return await watcher.breakers(["hk_a"]) == {}

    await eventually(closed_seen, 1.0, "a reset after the watch came back")
