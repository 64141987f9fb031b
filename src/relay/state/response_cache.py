"""The response cache's stores (SPEC §19): one Protocol, a bounded in-process LRU and Redis.

:class:`MemoryResponseCache` keeps entries in this process, least recently used out first once their
bytes pass ``max_bytes`` (``RELAY_CACHE_MAX_BYTES``); :class:`RedisResponseCache` keeps them in Redis
with a TTL per entry, so every replica reads what any replica stored. Both refuse an entry larger than
``max_entry_bytes`` (``RELAY_CACHE_MAX_ENTRY_BYTES``): ``put`` answers False and nothing is kept.

Entries live in a namespace (the policy's id) so that ``purge`` empties one policy's entries: the LRU
walks its index, Redis SCANs the namespace's key prefix and unlinks what it finds (a purge is rare and
off the hot path; lookups and stores stay one round trip).

What it deliberately does not know: keys' meaning, policies, HTTP. A store that fails raises
:class:`relay.state.base.StateUnavailable`; whether that is a miss is the caller's rule (it is: a cache
that does not answer is never an error for a request).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol

from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import RedisError

from relay.state.base import StateUnavailable
from relay.state.pipelined import PipelinedConnection

#: Default bound of the in-process store (``RELAY_CACHE_MAX_BYTES``): 64 MiB.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
#: Default largest entry kept (``RELAY_CACHE_MAX_ENTRY_BYTES``): 1 MiB.
DEFAULT_MAX_ENTRY_BYTES = 1024 * 1024
_PURGE_BATCH = 500


class ResponseCache(Protocol):
    """Where cached answers are kept. ``namespace`` groups entries for :meth:`purge`."""

    async def get(self, namespace: str, key: str) -> bytes | None:
        """The entry, or None when there is none (or it expired)."""
        ...

    async def put(self, namespace: str, key: str, value: bytes, ttl_s: int) -> bool:
        """Keep ``value`` for ``ttl_s`` seconds; False when it is too large to keep."""
        ...

    async def purge(self, namespace: str) -> int:
        """Drop every entry of ``namespace``; how many were dropped."""
        ...

    async def close(self) -> None: ...


class MemoryResponseCache:
    """This process's entries, bounded by their total bytes (key + value), LRU out first."""

    def __init__(
        self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    ) -> None:
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self._entries: OrderedDict[tuple[str, str], tuple[bytes, float]] = OrderedDict()
        self.size = 0  # bytes held: the sum of len(namespace) + len(key) + len(value) of the entries

    async def get(self, namespace: str, key: str) -> bytes | None:
        entry = self._entries.get((namespace, key))
        if entry is None:
            return None
        value, expires = entry
        if expires <= time.monotonic():
            self._drop((namespace, key))
            return None
        self._entries.move_to_end((namespace, key))
        return value

    async def put(self, namespace: str, key: str, value: bytes, ttl_s: int) -> bool:
        if len(value) > self.max_entry_bytes:
            return False
        ident = (namespace, key)
        if ident in self._entries:
            self._drop(ident)
        self._entries[ident] = (value, time.monotonic() + ttl_s)
        self.size += _weight(ident, value)
        while self.size > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))
        return ident in self._entries

    async def purge(self, namespace: str) -> int:
        mine = [ident for ident in self._entries if ident[0] == namespace]
        for ident in mine:
            self._drop(ident)
        return len(mine)

    async def close(self) -> None:
        self._entries.clear()
        self.size = 0

    def _drop(self, ident: tuple[str, str]) -> None:
        value, _ = self._entries.pop(ident)
        self.size -= _weight(ident, value)


def _weight(ident: tuple[str, str], value: bytes) -> int:
    return len(ident[0]) + len(ident[1]) + len(value)


class RedisResponseCache:
    """Entries in Redis under ``{prefix}rc:{namespace}:{key}`` with a TTL each (``SET … EX``), read by
    every replica. Lookups and stores go through one pipelined connection of their own
    (:class:`relay.state.pipelined.PipelinedConnection`: the cheap call path, never behind rate-limit
    scripts); a purge's SCAN through a small pool."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "relay:",
        timeout_s: float = 2.0,
        max_connections: int = 100,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
    ) -> None:
        # A full pool makes a lookup wait for a connection (up to the timeout), not fail: a burst
        # is not an outage, and a failure would skip the cache for a second.
        pool = BlockingConnectionPool.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            max_connections=max_connections,
            timeout=timeout_s,
            decode_responses=False,
        )
        self._redis: Redis = Redis(connection_pool=pool)
        self._wire = PipelinedConnection(url, timeout_s=timeout_s)
        self._prefix = prefix + "rc:"
        self.max_entry_bytes = max_entry_bytes

    def _key(self, namespace: str, key: str) -> str:
        return f"{self._prefix}{namespace}:{key}"

    async def get(self, namespace: str, key: str) -> bytes | None:
        try:
            value = await self._wire.execute("GET", self._key(namespace, key))
        except RedisError as exc:
            raise _unavailable(exc) from None
        return value if isinstance(value, bytes) or value is None else bytes(value)

    async def put(self, namespace: str, key: str, value: bytes, ttl_s: int) -> bool:
        if len(value) > self.max_entry_bytes:
            return False
        try:
            await self._wire.execute("SET", self._key(namespace, key), value, "EX", ttl_s)
        except RedisError as exc:
            raise _unavailable(exc) from None
        return True

    async def purge(self, namespace: str) -> int:
        pattern = _glob_escape(f"{self._prefix}{namespace}:") + "*"
        dropped = 0
        try:
            batch: list[bytes] = []
            async for name in self._redis.scan_iter(match=pattern, count=_PURGE_BATCH):
                batch.append(name)
                if len(batch) >= _PURGE_BATCH:
                    dropped += await self._redis.unlink(*batch)
                    batch = []
            if batch:
                dropped += await self._redis.unlink(*batch)
        except RedisError as exc:
            raise _unavailable(exc) from None
        return dropped

    async def close(self) -> None:
        await self._wire.close()
        await self._redis.aclose()
        await self._redis.connection_pool.disconnect()


def _unavailable(exc: RedisError) -> StateUnavailable:
    # The message names the failure, never the URL (it may carry a password).
    return StateUnavailable(f"response cache (Redis) failed: {type(exc).__name__}")


def _glob_escape(text: str) -> str:
    """``text`` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
