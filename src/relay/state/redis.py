"""``RedisState``: shared hot state in Redis, so N replicas together admit at most the limit (SPEC §5).

Every operation is exactly one round trip: multi-step ones are one EVALSHA of a script from
``relay.state.scripts`` (registered once; after a Redis restart or ``SCRIPT FLUSH`` the first call gets
NOSCRIPT, reloads and retries — three round trips once, then one again), single-step ones are one native
command (MGET, INCR, ZADD, ZMSCORE). Empty requests return without touching the network.

It deliberately does not decide what happens when Redis is down: driver errors become
:class:`relay.state.base.StateUnavailable` and the caller (rate limiter, key pool) chooses to fail open
or closed. Requires Redis ≥ 6.2 (ZMSCORE). Connections come from redis-py's pool; a stale pooled
connection (Redis restarted) is retried once on a fresh one, but timeouts are not retried, because a
script that timed out may already have run and must not be applied twice.

Breaker reads can cost no round trip at all: once :meth:`RedisState.start` has run (``relay serve``
does it at boot), a background task subscribes to the channel every trip and reset publishes on, and
``breakers`` answers from a :class:`relay.state.mirror.BreakerMirror` of what it read while that
subscription holds (see that module for the rules). Without ``start`` (tests, tools) every read is a
round trip, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Sequence
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from relay.state import scripts
from relay.state.base import (
    ADMITTED,
    BREAKER_TTL_AFTER_OPEN_S,
    EXPIRY_SLACK_S,
    MAX_BACKOFF_S,
    PERMANENT_BREAKER_TTL_S,
    BreakerRecord,
    LimitCheck,
    StateUnavailable,
    Verdict,
)
from relay.state.mirror import BreakerMirror

_SLACK_MS = EXPIRY_SLACK_S * 1000
_TTL_AFTER_OPEN_MS = BREAKER_TTL_AFTER_OPEN_S * 1000
_PERMANENT_TTL_MS = PERMANENT_BREAKER_TTL_S * 1000
_MAX_BACKOFF_MS = MAX_BACKOFF_S * 1000
#: The breaker watch pings Redis when it heard nothing for this long, and gives up on the connection
#: (mirror off, reconnect) when it heard nothing, not even the pong, for ``_WATCH_DEAD_S``.
_WATCH_PING_S = 1.0
_WATCH_DEAD_S = 3.0

log = logging.getLogger("relay.state")


def _unavailable(exc: RedisError) -> StateUnavailable:
    # The message names the failure, never the URL (it may carry a password).
    return StateUnavailable(f"shared state (Redis) failed: {type(exc).__name__}: {exc}")


def _glob_escape(text: str) -> str:
    """``text`` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _decode_breaker(raw: str | bytes) -> BreakerRecord:
    data = orjson.loads(raw)
    open_ms = data.get("o")
    return BreakerRecord(
        None if open_ms is None else open_ms / 1000,
        int(data.get("f", 0)),
        str(data.get("r", "")),
        str(data.get("v", "")),
    )


class RedisState:
    """Shared state in Redis under ``prefix``. Implements :class:`relay.state.base.SharedState`.

    ``url`` is a redis-py URL (``redis://``, ``rediss://``, ``unix://``); its query options, such as
    ``socket_timeout``, override ``timeout_s``. Replicas share state iff they use the same Redis,
    database and prefix. Construction does no I/O; the first operation connects.
    """

    def __init__(self, url: str, prefix: str = "relay:", *, timeout_s: float = 2.0) -> None:
        self._redis: Redis = Redis.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        # The watch has its own connection and never reconnects behind our back: a broken subscription
        # must surface here, because notifications sent while it was down are lost.
        self._watch_redis: Redis = Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            client_name=prefix + "breaker-watch",  # what CLIENT LIST shows for it
        )
        self._channel = prefix + "breakers"
        self._mirror = BreakerMirror()
        self._watch_task: asyncio.Task[None] | None = None
        self._watch_backoff = 0.1  # seconds before resubscribing; doubles up to 5 s while it fails
        self._watch_warned = False
        self.prefix = prefix
        self._rl = prefix + "rl:"
        self._cc = prefix + "cc:"
        self._br = prefix + "br:"
        self._rr = prefix + "rr:"
        self._lru = prefix + "lru:"
        self._reserve = self._redis.register_script(scripts.RESERVE)
        self._commit = self._redis.register_script(scripts.COMMIT)
        self._trip = self._redis.register_script(scripts.TRIP)
        self._reset = self._redis.register_script(scripts.RESET)
        self._pick = self._redis.register_script(scripts.PICK)

    # -- rate limits ---------------------------------------------------------------------------------

    async def reserve(self, checks: Sequence[LimitCheck], lease_id: str, lease_s: float) -> Verdict:
        if not checks:
            return ADMITTED
        keys: list[str] = []
        args: list[Any] = [lease_id, max(1, round(lease_s * 1000)), _SLACK_MS]
        for check in checks:
            keys.append((self._cc if check.kind == "concurrency" else self._rl) + check.key)
            args += (check.kind, check.limit, check.window_s, check.amount)
        try:
            admitted, index, retry_ms = await self._reserve(keys=keys, args=args)
        except RedisError as exc:
            raise _unavailable(exc) from exc
        if admitted:
            return ADMITTED
        return Verdict(False, checks[index - 1].key, retry_ms / 1000)

    async def commit(
        self, adds: Sequence[tuple[str, int, int]], release: Sequence[str], lease_id: str
    ) -> None:
        keys: list[str] = []
        args: list[Any] = [lease_id, _SLACK_MS, 0]
        for key, window_s, amount in adds:
            if amount > 0:  # a zero add would only create an empty counter
                keys.append(self._rl + key)
                args += (window_s, amount)
        args[2] = len(keys)
        keys += [self._cc + key for key in release]
        if not keys:
            return
        try:
            await self._commit(keys=keys, args=args)
        except RedisError as exc:
            raise _unavailable(exc) from exc

    async def window_usage(self, key: str, window_s: int, *, per_caller: bool) -> tuple[dict[str, int], int]:
        # Several round trips (TIME, SCAN pages, MGET): a control-plane read, never on the hot path.
        try:
            seconds, _micros = await self._redis.time()
            index = int(seconds) // window_s
            tail = f":{window_s}:{index}"
            base = self._rl + key
            if per_caller:
                pattern = _glob_escape(base + ":") + "*" + tail
                names = [name async for name in self._redis.scan_iter(match=pattern, count=1000)]
            else:
                names = [base + tail]
            values = await self._redis.mget(names) if names else []
        except RedisError as exc:
            raise _unavailable(exc) from exc
        found: dict[str, int] = {}
        for name, value in zip(names, values, strict=True):
            if value is None:
                continue
            found[name[len(base) + 1 : -len(tail)] if per_caller else ""] = int(value)
        return found, (index + 1) * window_s

    # -- breakers ------------------------------------------------------------------------------------

    async def breakers(self, key_ids: Sequence[str]) -> dict[str, BreakerRecord]:
        if not key_ids:
            return {}
        mirror = self._mirror
        known = mirror.get(key_ids)
        if known is not None:
            return known
        generation = mirror.generation
        try:
            raws = await self._redis.mget([self._br + key_id for key_id in key_ids])
        except RedisError as exc:
            raise _unavailable(exc) from exc
        found = {key_id: _decode_breaker(raw) for key_id, raw in zip(key_ids, raws, strict=True) if raw}
        mirror.store(key_ids, found, generation)
        return found

    async def trip(
        self,
        key_id: str,
        *,
        reason: str,
        version: str,
        retry_after: float | None = None,
        permanent: bool = False,
    ) -> BreakerRecord:
        if permanent:
            mode, retry_ms = "permanent", 0
        elif retry_after is not None:
            mode, retry_ms = "retry", max(0, round(retry_after * 1000))
        else:
            mode, retry_ms = "backoff", 0
        args = (
            mode,
            retry_ms,
            reason,
            version,
            _TTL_AFTER_OPEN_MS,
            _PERMANENT_TTL_MS,
            _MAX_BACKOFF_MS,
            self._channel,
            key_id,
        )
        try:
            raw = await self._trip(keys=[self._br + key_id], args=args)
        except RedisError as exc:
            raise _unavailable(exc) from exc
        finally:
            self._mirror.changed(key_id)  # also when the outcome is unknown (a timeout)
        return _decode_breaker(raw)

    async def reset(self, key_id: str) -> None:
        try:
            await self._reset(keys=[self._br + key_id], args=[self._channel, key_id])
        except RedisError as exc:
            raise _unavailable(exc) from exc
        finally:
            self._mirror.changed(key_id)

    # -- key selection -------------------------------------------------------------------------------

    async def next_counter(self, name: str) -> int:
        try:
            return int(await self._redis.incr(self._rr + name))
        except RedisError as exc:
            raise _unavailable(exc) from exc

    async def touch(self, name: str, member: str, at: float) -> None:
        try:
            await self._redis.zadd(self._lru + name, {member: at})
        except RedisError as exc:
            raise _unavailable(exc) from exc

    async def least_recent(self, name: str, members: Sequence[str]) -> list[str]:
        if not members:
            return []
        try:
            scores = await self._redis.zmscore(self._lru + name, list(members))
        except RedisError as exc:
            raise _unavailable(exc) from exc
        last_use = {m: -math.inf if s is None else s for m, s in zip(members, scores, strict=True)}
        # Never used sorts first; sorted() is stable, so ties keep the given order.
        return sorted(members, key=last_use.__getitem__)

    async def pick_state(
        self, key_ids: Sequence[str], counter_name: str | None
    ) -> tuple[dict[str, BreakerRecord], int | None]:
        if counter_name is None:
            return await self.breakers(key_ids), None
        known = self._mirror.get(key_ids)
        if known is not None:
            return known, await self.next_counter(counter_name)
        generation = self._mirror.generation
        keys = [self._br + key_id for key_id in key_ids]
        keys.append(self._rr + counter_name)
        try:
            values = await self._pick(keys=keys)
        except RedisError as exc:
            raise _unavailable(exc) from exc
        found = {key_id: _decode_breaker(raw) for key_id, raw in zip(key_ids, values, strict=False) if raw}
        self._mirror.store(key_ids, found, generation)
        return found, int(values[-1])

    # -- the breaker watch ---------------------------------------------------------------------------

    async def start(self) -> None:
        if self._watch_task is None:
            self._watch_task = asyncio.create_task(self._watch(), name="relay-breaker-watch")

    @property
    def mirroring(self) -> bool:
        """True while breaker reads may be answered from this replica's mirror."""
        return self._mirror.live

    async def _watch(self) -> None:
        """Keep the subscription; whenever it is not confirmed and healthy, the mirror is off."""
        while True:
            try:
                await self._watch_once()
            except (RedisError, OSError, TimeoutError) as exc:
                if self._mirror.live or not self._watch_warned:
                    log.warning(
                        "breaker changes are not being received (%s: %s); reading breakers from Redis "
                        "on every request until the subscription is back",
                        type(exc).__name__,
                        exc,
                    )
                    self._watch_warned = True
            except Exception:  # a driver bug must not end the watch for good: log it and resubscribe
                log.exception("the breaker watch failed; resubscribing")
            finally:
                self._mirror.reset_all(live=False)
            await asyncio.sleep(self._watch_backoff)
            self._watch_backoff = min(self._watch_backoff * 2, 5.0)

    async def _watch_once(self) -> None:
        loop = asyncio.get_running_loop()
        pubsub = self._watch_redis.pubsub()
        try:
            await pubsub.subscribe(self._channel)
            heard = loop.time()
            while True:
                message = await pubsub.get_message(timeout=_WATCH_PING_S)
                now = loop.time()
                if message is None:
                    if now - heard > _WATCH_DEAD_S:
                        raise TimeoutError(f"no answer from Redis for {_WATCH_DEAD_S:g} s")
                    await pubsub.ping()
                    continue
                heard = now
                kind = message["type"]
                if kind == "message":
                    self._mirror.changed(message["data"])
                elif kind == "subscribe":  # confirmed: from now on no change can pass unseen
                    self._mirror.reset_all(live=True)
                    self._watch_backoff = 0.1
                    self._watch_warned = False
                    log.info("breaker changes are being received; breaker reads are served from memory")
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    # -- lifecycle -----------------------------------------------------------------------------------

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        await self._watch_redis.aclose()
        await self._redis.aclose()
