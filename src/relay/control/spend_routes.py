"""``GET /api/policies/{ref}/spend`` (SPEC §5): what each budget rule's current window has spent.

What it does: finds the policy in this replica's snapshot (by name or id) and asks the rate limiter to
read its budget counters from the shared state — the same counters every replica's hot path charges,
so with Redis the answer is the fleet's spend, not this replica's.

What it does not know: how counters are keyed or stored (``RateLimiter.spend``), the database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI

from relay.errors import NotFound
from relay.request.ratelimit import RateLimiter
from relay.snapshot import Policy, Snapshot


def _find(snapshot: Snapshot, ref: str) -> Policy:
    policy = snapshot.policies.get(ref)
    if policy is None:
        policy = next((p for p in snapshot.policies.values() if p.name == ref), None)
    if policy is None:
        raise NotFound(f"Policy {ref!r} not found")
    return policy


SpendReader = Callable[[str], Awaitable[list[dict[str, Any]]]]


def spend_reader(limiter: RateLimiter, snapshot: Callable[[], Snapshot]) -> SpendReader:
    """``ref`` (a policy's name or id) → what the route answers under ``rules``; for the dashboard."""

    async def read(ref: str) -> list[dict[str, Any]]:
        return await limiter.spend(_find(snapshot(), ref))

    return read


def mount_spend_routes(
    app: FastAPI, *, limiter: RateLimiter, snapshot: Callable[[], Snapshot], require_admin: Any
) -> None:
    read = spend_reader(limiter, snapshot)

    @app.get("/api/policies/{ref}/spend", dependencies=[Depends(require_admin)], tags=["Policy"])
    async def policy_spend(ref: str) -> dict[str, Any]:
        """Each ``cost_usd`` rule of the policy: its limit and, per counted key (the policy, or each
        credential / project / team that spent in the current window), spent and remaining USD and
        when the window resets. A shared state that does not answer is a 503."""
        return {"rules": await read(ref)}
