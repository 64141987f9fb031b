"""Fixtures for the rate-limiter and key-pool suite: real shared state, real catalog records.

``state`` (from ``tests.fixtures.shared_state``) runs each test on ``MemoryState`` and on the real
Redis at ``RELAY_TEST_REDIS_URL`` (never a mock; a missing Redis skips, or fails under ``CI=true``).
``new_redis_state`` makes several ``RedisState`` objects on one prefix, standing for replicas.
``CountingState`` wraps a real ``MemoryState`` and counts calls, so tests can assert how many state
round trips a request costs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

from relay.domain.ratelimits import RateLimitRule
from relay.snapshot import HostKey, Policy
from relay.state import MemoryState, SharedState


class CountingState:
    """Delegates every call to a real ``MemoryState`` and counts them by method name."""

    def __init__(self) -> None:
        self.inner = MemoryState()
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted

    def as_state(self) -> SharedState:
        return cast(SharedState, self)


def rule(meter: str, limit: int, window: str = "9999999s", per: str = "policy") -> RateLimitRule:
    return RateLimitRule.model_validate({"meter": meter, "limit": limit, "window": window, "per": per})


def policy(
    rules: Sequence[RateLimitRule] = (),
    *,
    key_selection: str = "prioritized",
    id: str = "pol_test",
    name: str = "standard",
    host_key_ids: Sequence[str] = (),
) -> Policy:
    return Policy(
        id=id,
        name=name,
        grants=(),
        host_key_ids=tuple(host_key_ids),
        key_selection=key_selection,
        rules=tuple(rules),
        payload_logging=False,
        enabled=True,
    )


def host_keys(n: int, host_id: str = "hst_openai", version: str = "v1") -> list[HostKey]:
    return [
        HostKey(
            id=f"hk_{i}", name=f"key-{i}", host_id=host_id, value=f"sk-{i}", enabled=True, version=version
        )
        for i in range(1, n + 1)
    ]
