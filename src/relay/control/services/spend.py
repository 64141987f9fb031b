"""What each budget rule of a policy has spent in its current window (SPEC §5), for
``GET /api/policies/{ref}/spend`` and the dashboard's catalog page alike.

What it does: finds the policy in this replica's snapshot (by name or id) and asks the rate limiter to
read its budget counters from the shared state — the same counters every replica's hot path charges,
so with Redis the answer is the fleet's spend, not this replica's.

What it does not know: how counters are keyed or stored (``RateLimiter.spend``), the database, HTTP.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from relay.errors import NotFound
from relay.request.ratelimit import RateLimiter
from relay.snapshot import Policy, Snapshot


def find_policy(snapshot: Snapshot, ref: str) -> Policy:
    """The policy named or numbered ``ref`` in this replica's snapshot (404 when unknown)."""
    policy = snapshot.policies.get(ref)
    if policy is None:
        policy = next((p for p in snapshot.policies.values() if p.name == ref), None)
    if policy is None:
        raise NotFound(f"Policy {ref!r} not found")
    return policy


SpendReader = Callable[[str], Awaitable[list[dict[str, Any]]]]


def spend_reader(limiter: RateLimiter, snapshot: Callable[[], Snapshot]) -> SpendReader:
    """``ref`` (a policy's name or id) → what the route answers under ``rules``."""

    async def read(ref: str) -> list[dict[str, Any]]:
        return await limiter.spend(find_policy(snapshot(), ref))

    return read
