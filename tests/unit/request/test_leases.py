"""Concurrency leases of long requests (SPEC §5): the limiter renews the lease of every request it
admitted until its commit, so a stream that outlives ``lease_s`` keeps its slot (the limit does not
over-admit), the slot frees at commit, and a holder that stopped renewing (its process died) loses it
within ``lease_s``. On MemoryState and Redis (``state``), with a lease of one second renewed every 0.1 s.
"""

from __future__ import annotations

import asyncio

import pytest

from relay.adapters.base import Usage
from relay.errors import RateLimited
from relay.request.ratelimit import RateLimiter
from relay.snapshot import Policy
from relay.state import SharedState
from tests.unit.request.limit_records import CountingState, policy, rule

LEASE_S = 1.0
EVERY_S = 0.1


async def refused(limiter: RateLimiter, pol: Policy) -> bool:
    try:
        reservation = await limiter.reserve(pol, "key_b")
    except RateLimited:
        return True
    await limiter.commit(reservation, Usage())
    return False


async def test_a_running_stream_keeps_its_slot_past_lease_s_and_frees_it_at_commit(
    state: SharedState,
) -> None:
    limiter = RateLimiter(state, lease_s=LEASE_S, renew_every_s=EVERY_S)
    pol = policy([rule("concurrency", 1)])
    try:
        stream = await limiter.reserve(pol, "key_a")
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.5 * LEASE_S
        while loop.time() < until:  # the stream is still running: every other request is refused
            with pytest.raises(RateLimited, match="allows 1 concurrent requests"):
                await limiter.reserve(pol, "key_b")
            await asyncio.sleep(0.1)
        await limiter.commit(stream, Usage(3, 4))  # the stream ended
        assert not await refused(limiter, pol)
    finally:
        await limiter.close()


async def test_a_lease_whose_holder_stopped_renewing_expires(state: SharedState) -> None:
    holder = RateLimiter(state, lease_s=LEASE_S, renew_every_s=EVERY_S)
    other = RateLimiter(state, lease_s=LEASE_S, renew_every_s=EVERY_S)
    pol = policy([rule("concurrency", 1)])
    try:
        await holder.reserve(pol, "key_a")
        await asyncio.sleep(1.5 * LEASE_S)
        assert await refused(other, pol)  # renewed: still held past lease_s
        await holder.close()  # its process died: no commit, no more renewals
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await refused(other, pol):
            assert loop.time() < deadline, "a lease nobody renews never expired"
            await asyncio.sleep(0.05)
    finally:
        await holder.close()
        await other.close()


async def test_renewing_costs_one_state_call_for_every_lease_held_and_none_when_idle() -> None:
    """No call per request or per chunk: one ``renew`` per interval covers every running request, and
    no renewal happens once all of them committed."""
    counting = CountingState()
    limiter = RateLimiter(counting.as_state(), lease_s=LEASE_S, renew_every_s=EVERY_S)
    pol = policy([rule("concurrency", 10)])
    try:
        held = [await limiter.reserve(pol, f"key_{i}") for i in range(5)]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while counting.calls["renew"] < 3:
            assert loop.time() < deadline, "leases were never renewed"
            await asyncio.sleep(0.02)
        assert counting.calls["reserve"] == 5
        for reservation in held:
            await limiter.commit(reservation, Usage())
        await asyncio.sleep(3 * EVERY_S)
        renewals = counting.calls["renew"]
        await asyncio.sleep(3 * EVERY_S)
        assert counting.calls["renew"] == renewals  # nothing held: the renewer has stopped
        assert counting.calls["commit"] == 5  # each released its lease
    finally:
        await limiter.close()
