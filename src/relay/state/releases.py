"""Lease releases that could not be sent: kept, then re-sent once Redis answers again (SPEC §5).

Why. A request's concurrency slot is a member of a sorted set, freed by its release (ZREM). When Redis
does not answer at that moment (the limiter fails open or closed meanwhile), the slot would stay taken
until its lease TTL; :class:`PendingReleases` keeps those releases and :meth:`PendingReleases.flush`
re-sends them when the outage gate's probe is answered, so a fail-open episode cannot leave a policy's
slots taken.

Invariants. At most :data:`MAX_UNRELEASED` releases are kept (past that the oldest are dropped: their
TTL still frees them). Re-sending is harmless when a release did land after all: ZREM is idempotent.
"""

from __future__ import annotations

import logging

from redis.asyncio import Redis

#: Lease releases that failed are kept (and re-sent once Redis answers) up to this many; past it the
#: oldest are dropped and expire with their lease TTL instead.
MAX_UNRELEASED = 100_000
_FLUSH_BATCH = 500

log = logging.getLogger("relay.state")


class PendingReleases:
    """lease id → the concurrency keys whose release failed, oldest first."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._leases: dict[str, tuple[str, ...]] = {}

    def __len__(self) -> int:
        return len(self._leases)

    def keep(self, keys: list[str], lease_id: str) -> None:
        if not keys or not lease_id:
            return
        if len(self._leases) >= MAX_UNRELEASED:
            self._leases.pop(next(iter(self._leases)))  # the oldest; its TTL still frees it
        self._leases[lease_id] = tuple(keys)

    async def flush(self) -> None:
        """Re-send every kept release, a pipeline of :data:`_FLUSH_BATCH` leases at a time."""
        sent = 0
        while self._leases:
            batch = list(self._leases.items())[:_FLUSH_BATCH]
            pipe = self._redis.pipeline(transaction=False)
            for lease_id, keys in batch:
                for key in keys:
                    pipe.zrem(key, lease_id)
            await pipe.execute()
            for lease_id, _keys in batch:
                self._leases.pop(lease_id, None)
            sent += len(batch)
        if sent:
            log.info("released %d concurrency leases whose release had failed while Redis was away", sent)
