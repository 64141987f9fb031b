"""What every :class:`relay.state.redis.RedisState` operation stands on: the bounded connection pool,
the outage gate, the lease releases kept for re-sending, the breaker mirror and its watch, the key
prefixes and the registered scripts; and how a driver error becomes ``StateUnavailable``.

It exists so ``relay.state.redis`` holds the operations themselves (rate limits, breakers, key
selection), one round trip each. It deliberately runs no operation of its own but ``ping``: the
operations are ``RedisState``'s, which inherits this class, so a call costs no extra hop. A Redis that
does not answer closes the gate here (:meth:`RedisConnection._failed`); the message of the error names
the failure, never the URL.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay.state import scripts
from relay.state.base import StateUnavailable
from relay.state.gate import OutageGate
from relay.state.mirror import BreakerMirror
from relay.state.pool import DEFAULT_MAX_CONNECTIONS, PoolWaitTimeout, WaitingConnectionPool
from relay.state.releases import PendingReleases
from relay.state.watch import BreakerWatch


def _unavailable(exc: RedisError) -> StateUnavailable:
    # The message names the failure, never the URL (it may carry a password).
    return StateUnavailable(f"shared state (Redis) failed: {type(exc).__name__}: {exc}")


def _no_answer(exc: RedisError) -> bool:
    """Did Redis fail to answer (down, frozen, unreachable), as opposed to answering with an error? A
    checkout that waited past the pool's safety net is not counted: busy is not down."""
    return isinstance(exc, (RedisConnectionError, RedisTimeoutError)) and not isinstance(exc, PoolWaitTimeout)


class RedisConnection:
    """The pool, gate, mirror, watch, key prefixes and scripts of one ``RedisState`` (see the module)."""

    def __init__(
        self,
        url: str,
        prefix: str = "relay:",
        *,
        timeout_s: float = 2.0,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self._pool = pool = WaitingConnectionPool.for_url(url, timeout_s, max_connections)
        self._redis: Redis = Redis.from_pool(pool)
        # Lease releases that failed, re-sent when Redis answers again.
        self._unreleased = PendingReleases(self._redis)
        # After an operation got no answer, the next ones fail at once until a probe is answered.
        self._gate = OutageGate(self._redis.ping, self._unreleased.flush)
        self._channel = prefix + "breakers"
        self._mirror = BreakerMirror()
        self._watch = BreakerWatch(url, self._channel, self._mirror, prefix=prefix, timeout_s=timeout_s)
        self.prefix = prefix
        self._rl = prefix + "rl:"
        self._cc = prefix + "cc:"
        self._br = prefix + "br:"
        self._bf = prefix + "bf:"
        self._rr = prefix + "rr:"
        self._lru = prefix + "lru:"
        self._reserve = scripts.Script(self._redis, scripts.RESERVE)
        self._reserve_many = scripts.Script(self._redis, scripts.RESERVE_MANY)
        self._commit = scripts.Script(self._redis, scripts.COMMIT)
        self._refund = scripts.Script(self._redis, scripts.REFUND)
        self._renew = scripts.Script(self._redis, scripts.RENEW)
        self._trip = scripts.Script(self._redis, scripts.TRIP)
        self._reset = scripts.Script(self._redis, scripts.RESET)
        self._pick = scripts.Script(self._redis, scripts.PICK)
        self._probe = scripts.Script(self._redis, scripts.PROBE)
        self._release_probe = scripts.Script(self._redis, scripts.RELEASE_PROBE)

    # -- failures ------------------------------------------------------------------------------------

    def _failed(self, exc: RedisError) -> StateUnavailable:
        if _no_answer(exc):
            reason = f"{type(exc).__name__}: {exc}"
            if not self._gate.down:
                self._gate.close_gate(reason)
                self._pool.fail_waiters(f"Redis did not answer ({reason})")  # queued callers: at once
        return _unavailable(exc)

    def _skipped(self) -> StateUnavailable:
        return StateUnavailable("shared state (Redis) did not answer; not asking again until a probe does")

    @property
    def answering(self) -> bool:
        """False from an unanswered operation until the background probe gets an answer."""
        return not self._gate.down

    @property
    def unreleased(self) -> int:
        """Lease releases waiting to be re-sent (Redis did not answer when they were due)."""
        return len(self._unreleased)

    # -- the breaker watch ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._watch.start()

    @property
    def mirroring(self) -> bool:
        """True while breaker reads may be answered from this replica's mirror."""
        return self._mirror.live

    # -- lifecycle -----------------------------------------------------------------------------------

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        await self._watch.close()
        await self._gate.close()
        await self._redis.aclose()
