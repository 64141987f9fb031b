"""``WaitingConnectionPool``: redis-py's connection pool, except that a full pool makes the caller wait.

Why: redis-py's async pool raises ``MaxConnectionsError`` the moment every connection is in use. Under a
burst (1 000 concurrent requests on a replica with 100 connections) that error looked exactly like
"Redis is down", so the rate limiter failed open and admitted far past the limit, and lease releases
were lost (SPEC §5: "A Redis that answers is never bypassed: when the client's connections are busy,
the request waits for one (up to the Redis timeout)").

redis-py's own ``BlockingConnectionPool`` waits too, but it takes an ``asyncio.Condition`` and arms a
timeout on every checkout, also when a connection is free. This subclass keeps the plain pool's path
untouched while a connection is free (no lock, no timer, nothing extra per request) and only queues
callers when the pool is exhausted: they wait in FIFO order, each woken by a release.

Waiting is not an outage: a replica so busy that its connections stay taken (its event loop is behind,
the Redis round trips themselves are fast) must queue, not bypass Redis. So the wait has no short
timeout of its own; it ends when a connection frees up, when :meth:`fail_waiters` is called (the owner
saw Redis not answer on some connection: the queued callers then fail at once instead of each
waiting a timeout), or after ``wait_timeout`` (a safety net, many Redis timeouts long), with
:class:`PoolWaitTimeout`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

#: Default size of the connection pool (``RELAY_REDIS_MAX_CONNECTIONS``); callers beyond it wait.
DEFAULT_MAX_CONNECTIONS = 100
#: A checkout waits for a free connection up to this many Redis timeouts (a safety net: the wait
#: normally ends when a connection frees up, or at once when Redis is seen not to answer).
POOL_WAIT_TIMEOUTS = 10


class PoolWaitTimeout(RedisConnectionError):
    """No connection became free within the pool's safety-net wait (not evidence that Redis is down)."""


class WaitingConnectionPool(ConnectionPool):
    """A ``ConnectionPool`` of at most ``max_connections`` whose checkouts wait while it is full."""

    def __init__(self, *, wait_timeout: float, **connection_kwargs: Any) -> None:
        super().__init__(**connection_kwargs)
        self.wait_timeout = wait_timeout
        self._waiters: deque[asyncio.Future[None]] = deque()

    @classmethod
    def for_url(cls, url: str, timeout_s: float, max_connections: int) -> WaitingConnectionPool:
        """The pool ``RedisState`` uses: decoded replies, ``timeout_s`` per socket operation, one retry
        of a stale connection (never of a timeout); the URL's query options (``socket_timeout``,
        ``max_connections``) win, and the checkout wait follows the socket timeout actually used."""
        pool = cls.from_url(
            url,
            wait_timeout=POOL_WAIT_TIMEOUTS * timeout_s,
            max_connections=max_connections,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        pool.wait_timeout = POOL_WAIT_TIMEOUTS * float(
            pool.connection_kwargs.get("socket_timeout") or timeout_s
        )
        return pool

    @property
    def waiting(self) -> int:
        """Checkouts queued for a connection right now (for tests and diagnostics)."""
        return len(self._waiters)

    async def get_connection(self, command_name: Any = None, *keys: Any, **options: Any) -> Any:
        # Fast path: a free connection (or room for a new one) and nobody queued before us.
        if self._waiters or not self.can_get_connection():
            await self._wait_for_room()
        return await super().get_connection()

    async def _wait_for_room(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_timeout
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)  # queued until it leaves, so nobody arriving later overtakes it
        try:
            while not (self.can_get_connection() and self._waiters[0] is waiter):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise PoolWaitTimeout(
                        f"no Redis connection became free within {self.wait_timeout:g} s "
                        f"({self.max_connections} in use)"
                    )
                if waiter.done():  # woken (or timed out) without a turn: wait again in the same place
                    fresh: asyncio.Future[None] = loop.create_future()
                    self._waiters[self._waiters.index(waiter)] = fresh
                    waiter = fresh
                try:
                    await asyncio.wait_for(waiter, remaining)
                except TimeoutError:
                    pass
                except _WaitersFailed as failed:
                    raise RedisConnectionError(str(failed)) from None
        finally:
            self._waiters.remove(waiter)
            self._wake_one()  # the next in line may fit too (or this one gave up its turn)

    async def release(self, connection: AbstractConnection) -> None:
        await super().release(connection)
        self._wake_one()

    async def disconnect(self, inuse_connections: bool = True) -> None:
        await super().disconnect(inuse_connections)
        self._wake_one()

    def fail_waiters(self, reason: str) -> None:
        """Make every queued checkout fail now with ``ConnectionError(reason)`` (Redis stopped answering)."""
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(_WaitersFailed(reason))

    def _wake_one(self) -> None:
        """Wake the head of the queue if there is room for it (FIFO: only the head may take it)."""
        if self._waiters and self.can_get_connection():
            head = self._waiters[0]
            if not head.done():
                head.set_result(None)


class _WaitersFailed(Exception):
    """Set on queued waiters by :meth:`WaitingConnectionPool.fail_waiters` (re-raised as ConnectionError)."""
