"""Shared hot state: rate-limit windows and leases, circuit breakers, key-selection counters.

One Protocol (:class:`SharedState`, in ``base``) with two implementations: :class:`MemoryState`
(this process only) and :class:`RedisState` (shared by every replica, one round trip per operation,
Lua for atomic steps). :func:`open_state` picks one from ``RELAY_REDIS_URL``. See docs/state.md.
"""

from relay.state.base import (
    ADMITTED,
    BreakerRecord,
    LimitCheck,
    LimitKind,
    SharedState,
    StateUnavailable,
    Verdict,
    backoff_s,
)
from relay.state.factory import open_state
from relay.state.memory import MemoryState
from relay.state.redis import RedisState

__all__ = [
    "ADMITTED",
    "BreakerRecord",
    "LimitCheck",
    "LimitKind",
    "MemoryState",
    "RedisState",
    "SharedState",
    "StateUnavailable",
    "Verdict",
    "backoff_s",
    "open_state",
]
