"""Choose the shared-state implementation from configuration (SPEC §1, ``RELAY_REDIS_URL``).

Called once by ``boot``; the result is passed explicitly to the rate limiter and the key pool. It does
no I/O: ``boot`` should ``await state.ping()`` if it wants to fail fast on an unreachable Redis.
"""

from __future__ import annotations

from relay.state.base import SharedState
from relay.state.memory import MemoryState
from relay.state.pool import DEFAULT_MAX_CONNECTIONS
from relay.state.redis import RedisState


def open_state(
    redis_url: str | None,
    prefix: str = "relay:",
    *,
    timeout_s: float = 2.0,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> SharedState:
    """``RedisState`` when a Redis URL is configured (shared by all replicas), else ``MemoryState``
    (per process: correct for one replica, N × limit across N replicas)."""
    if redis_url:
        return RedisState(redis_url, prefix=prefix, timeout_s=timeout_s, max_connections=max_connections)
    return MemoryState()
