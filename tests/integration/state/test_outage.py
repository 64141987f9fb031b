"""``RedisState`` under load and when Redis stops answering (SPEC §5), on real Redis servers.

- A full connection pool makes callers wait, never fail: 600 concurrent reserves over three "replicas"
  with 3 connections each admit exactly the limit and raise nothing.
- A frozen Redis (a private ``redis-server`` under SIGSTOP, never the shared one): the operations in
  flight each fail after one timeout; the next ones fail at once, without I/O, until the background
  probe gets an answer; a release that failed meanwhile is re-sent then, so no lease is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from redis.asyncio import Redis

from relay.state import LimitCheck, RedisState, StateUnavailable
from tests.fixtures.databases import REDIS_URL
from tests.fixtures.polling import wait_until
from tests.fixtures.private_redis import PrivateRedis

TIMEOUT_S = 0.5


async def test_a_full_pool_waits_instead_of_failing(redis_admin: tuple[str, Redis]) -> None:
    prefix, admin = redis_admin
    replicas = [RedisState(REDIS_URL, prefix=prefix, max_connections=3, timeout_s=10) for _ in range(3)]
    requests = [LimitCheck("pol:r", "window", 200, 3600)]
    lease = [LimitCheck("pol:c", "concurrency", 50)]
    try:

        async def one(i: int) -> tuple[bool, bool]:
            state = replicas[i % 3]
            by_requests = (await state.reserve(requests, "", 1)).admitted
            by_lease = (await state.reserve(lease, f"lease-{i}", 60)).admitted
            return by_requests, by_lease

        outcomes = await asyncio.gather(*(one(i) for i in range(600)))  # raises if any failed
        admitted = sum(r for r, _ in outcomes)
        leased = sum(c for _, c in outcomes)
        print(f"\n600 concurrent reserves, 3 replicas x 3 connections: {admitted}/200, {leased}/50 leases")
        assert (admitted, leased) == (200, 50)
        assert all(state.answering for state in replicas)
        assert all(len(state._pool._in_use_connections) <= 3 for state in replicas)
        for i in range(600):
            await replicas[i % 3].commit([], ["pol:c"], f"lease-{i}")
        assert await admin.zcard(prefix + "cc:pol:c") == 0
    finally:
        for state in replicas:
            await state.close()


async def test_a_frozen_redis_costs_one_timeout_then_fails_at_once_until_it_answers(
    private_redis: PrivateRedis,
) -> None:
    state = RedisState(private_redis.url, prefix="t:", timeout_s=TIMEOUT_S)
    lease = [LimitCheck("pol:c", "concurrency", 5)]
    loop = asyncio.get_running_loop()
    try:
        assert (await state.reserve(lease, "held", 60)).admitted
        private_redis.freeze()

        async def timed(call: Callable[[], object]) -> tuple[float, str]:
            started = loop.time()
            try:
                await call()  # type: ignore[misc]
            except StateUnavailable as exc:
                return loop.time() - started, exc.message
            raise AssertionError("a frozen Redis answered")

        in_flight = await asyncio.gather(*(timed(lambda: state.reserve(lease, "x", 60)) for _ in range(20)))
        assert all("TimeoutError" in message for _, message in in_flight), in_flight
        assert not state.answering
        # Once it has not answered, nothing waits for it: every step fails without I/O.
        later = [
            await timed(lambda: state.reserve(lease, "y", 60)),
            await timed(lambda: state.breakers(["k"])),
            await timed(lambda: state.trip("k", reason="upstream_5xx", version="v1")),
            await timed(lambda: state.commit([], ["pol:c"], "held")),
            # A reserve that timed out may still run when Redis wakes: its caller releases it anyway.
            await timed(lambda: state.commit([], ["pol:c"], "x")),
        ]
        print(
            f"\nfrozen Redis: in-flight ops waited up to {max(t for t, _ in in_flight):.2f} s "
            f"(timeout {TIMEOUT_S} s); later ops {max(t for t, _ in later) * 1000:.1f} ms"
        )
        assert all("did not answer" in message for _, message in later), later
        assert state.unreleased == 2  # the releases of "held" and "x" are kept for later
        await asyncio.sleep(2.5)  # probes keep failing meanwhile: still closed
        assert not state.answering

        private_redis.thaw()
        await wait_until("the probe to see Redis answer", lambda: state.answering)
        assert state.unreleased == 0
        client = private_redis.client()
        try:
            assert client.zrange("t:cc:pol:c", 0, -1) == []  # no lease left behind
        finally:
            client.close()
        assert (await state.reserve(lease, "again", 60)).admitted
    finally:
        await state.close()


async def test_callers_queued_for_a_connection_fail_with_the_first_timeout(
    private_redis: PrivateRedis,
) -> None:
    """2 connections, 20 callers, Redis frozen: the 18 queued do not each wait their turn and a timeout
    (that would be 10 timeouts in a row); they fail when the first timeout shows Redis is not answering."""
    state = RedisState(private_redis.url, prefix="t:", timeout_s=TIMEOUT_S, max_connections=2)
    lease = [LimitCheck("pol:c", "concurrency", 5)]
    try:
        assert (await state.reserve(lease, "warm", 60)).admitted
        await state.commit([], ["pol:c"], "warm")
        private_redis.freeze()
        outcomes = await asyncio.gather(
            *(state.reserve(lease, f"q{i}", 60) for i in range(20)), return_exceptions=True
        )
        assert all(isinstance(outcome, StateUnavailable) for outcome in outcomes), outcomes
        # Only the callers on the 2 connections waited out a socket timeout of their own (each may have
        # handed its connection to the next in line before the failure was seen: 4 at most); the other
        # 16 or more failed with them ("did not answer"). Each waiting its turn, all 20 would time out.
        timed_out = [o for o in outcomes if str(o).startswith("shared state (Redis) failed: TimeoutError")]
        assert 1 <= len(timed_out) <= 4, outcomes
        assert all("did not answer" in str(o) for o in outcomes if o not in timed_out), outcomes
        assert state._pool.waiting == 0
    finally:
        private_redis.thaw()
        await state.close()
