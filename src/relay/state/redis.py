"""``RedisState``: shared hot state in Redis, so N replicas together admit at most the limit (SPEC §5).

Every operation is exactly one round trip: multi-step ones are one EVALSHA of a script from
``relay.state.scripts`` (registered once; after a Redis restart or ``SCRIPT FLUSH`` the first call gets
NOSCRIPT, reloads and retries — three round trips once, then one again), single-step ones are one native
command (MGET, INCR, ZADD, ZMSCORE). Empty requests return without touching the network.

It deliberately does not decide what happens when Redis is down: driver errors become
:class:`relay.state.base.StateUnavailable` and the caller (rate limiter, key pool) chooses to fail open
or closed. Requires Redis ≥ 6.2 (ZMSCORE). Connections come from a bounded pool whose checkouts wait
when it is full (:mod:`relay.state.pool`: busy connections are not an outage); a stale pooled
connection (Redis restarted) is retried once on a fresh one, but timeouts are not retried, because a
script that timed out may already have run and must not be applied twice.

A Redis that does not answer (timeout, refused connection) closes an :class:`relay.state.gate.OutageGate`:
every later operation raises ``StateUnavailable`` at once, without I/O, until a background probe (at most
one per second) is answered. Lease releases that failed meanwhile are kept and re-sent then
(:mod:`relay.state.releases`), so a fail-open episode cannot leave a policy's concurrency slots taken
until their TTL.

Breaker reads can cost no round trip at all: once :meth:`RedisState.start` has run (``relay serve``
does it at boot), a :class:`relay.state.watch.BreakerWatch` subscribes to the channel every trip and
reset publishes on, and ``breakers`` answers from a :class:`relay.state.mirror.BreakerMirror` of what
it read while that subscription holds (see that module for the rules). Without ``start`` (tests,
tools) every read is a round trip, as before.

What the operations stand on (the pool, the gate, the mirror and its watch, the registered scripts, and
how a driver error becomes ``StateUnavailable``) is :class:`relay.state.redis_connection.RedisConnection`,
which ``RedisState`` inherits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from relay.domain.breaker import DEFAULT_TUNING, BreakerTuning
from relay.state import scripts
from relay.state.base import (
    ADMITTED,
    BREAKER_TTL_AFTER_OPEN_S,
    EXPIRY_SLACK_S,
    PERMANENT_BREAKER_TTL_S,
    BreakerRecord,
    LimitCheck,
    Verdict,
)
from relay.state.redis_connection import RedisConnection, _unavailable

_SLACK_MS = EXPIRY_SLACK_S * 1000
_TTL_AFTER_OPEN_MS = BREAKER_TTL_AFTER_OPEN_S * 1000
_PERMANENT_TTL_MS = PERMANENT_BREAKER_TTL_S * 1000

log = logging.getLogger("relay.state")


def _glob_escape(text: str) -> str:
    """``text`` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class RedisState(RedisConnection):
    """Shared state in Redis under ``prefix``. Implements :class:`relay.state.base.SharedState`.

    ``url`` is a redis-py URL (``redis://``, ``rediss://``, ``unix://``); its query options, such as
    ``socket_timeout`` or ``max_connections``, override ``timeout_s`` and ``max_connections``. At most
    ``max_connections`` connections are open; further operations wait for one (up to the timeout)
    instead of failing (:mod:`relay.state.pool`). Replicas share state iff they use the same Redis,
    database and prefix. Construction does no I/O; the first operation connects.
    """

    # -- rate limits ---------------------------------------------------------------------------------

    async def reserve(self, checks: Sequence[LimitCheck], lease_id: str, lease_s: float) -> Verdict:
        if not checks:
            return ADMITTED
        keys: list[str] = []
        args: list[Any] = [lease_id, max(1, round(lease_s * 1000)), _SLACK_MS]
        for check in checks:
            keys.append((self._cc if check.kind == "concurrency" else self._rl) + check.key)
            args += (check.kind, check.limit, check.window_s, check.amount)
        if self._gate.down:
            raise self._skipped()
        try:
            admitted, index, retry_ms = await self._reserve(keys=keys, args=args)
        except RedisError as exc:
            raise self._failed(exc) from exc
        if admitted:
            return ADMITTED
        return Verdict(False, checks[index - 1].key, retry_ms / 1000)

    async def reserve_many(self, checks: Sequence[LimitCheck], n: int) -> tuple[int, Verdict]:
        if any(check.kind != "window" for check in checks):
            raise ValueError("reserve_many takes window checks only")
        if not checks:
            return n, ADMITTED
        args: list[Any] = [n, _SLACK_MS]
        for check in checks:
            args += (check.limit, check.window_s, check.amount)
        if self._gate.down:
            raise self._skipped()
        try:
            keys = [self._rl + check.key for check in checks]
            granted, index, retry_ms = await self._reserve_many(keys=keys, args=args)
        except RedisError as exc:
            raise self._failed(exc) from exc
        if granted > 0:
            return int(granted), ADMITTED
        return 0, Verdict(False, checks[index - 1].key, retry_ms / 1000)

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
        releases = [self._cc + key for key in release]
        keys += releases
        if not keys:
            return
        if self._gate.down:
            self._unreleased.keep(releases, lease_id)
            raise self._skipped()
        try:
            await self._commit(keys=keys, args=args)
        except RedisError as exc:
            # The release is re-sent once Redis answers, so a lease never waits for its TTL while this
            # process lives. Token adds are not (a timed-out script may have run: no double count).
            self._unreleased.keep(releases, lease_id)
            raise self._failed(exc) from exc

    async def renew(self, leases: Sequence[tuple[str, str]], lease_s: float) -> int:
        if not leases:
            return 0
        keys = [self._cc + key for key, _lease_id in leases]
        args: list[Any] = [max(1, round(lease_s * 1000)), _SLACK_MS, *(lease_id for _key, lease_id in leases)]
        if self._gate.down:
            raise self._skipped()
        try:
            return int(await self._renew(keys=keys, args=args))
        except RedisError as exc:
            raise self._failed(exc) from exc

    async def refund(self, adds: Sequence[tuple[str, int, int]]) -> None:
        keys: list[str] = []
        args: list[Any] = []
        for key, window_s, amount in adds:
            if amount > 0:
                keys.append(self._rl + key)
                args += (window_s, amount)
        if not keys:
            return
        if self._gate.down:
            raise self._skipped()
        try:
            await self._refund(keys=keys, args=args)
        except RedisError as exc:
            raise self._failed(exc) from exc

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
        if self._gate.down:
            raise self._skipped()
        try:
            raws = await self._redis.mget([self._br + key_id for key_id in key_ids])
        except RedisError as exc:
            raise self._failed(exc) from exc
        found = {
            key_id: scripts.decode_breaker(raw) for key_id, raw in zip(key_ids, raws, strict=True) if raw
        }
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
        seen: int | None = None,
        tuning: BreakerTuning = DEFAULT_TUNING,
    ) -> BreakerRecord | None:
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
            max(1, round(tuning.max_open_s * 1000)),
            self._channel,
            key_id,
            -1 if seen is None else seen,
            tuning.threshold,
            max(1, round(tuning.window_s * 1000)),
        )
        if self._gate.down:
            raise self._skipped()
        try:
            raw, opened = await self._trip(keys=[self._br + key_id, self._bf + key_id], args=args)
        except RedisError as exc:
            raise self._failed(exc) from exc
        finally:
            self._mirror.changed(key_id)  # also when the outcome is unknown (a timeout)
        return scripts.decode_breaker(raw, opened=bool(opened)) if raw else None

    async def reset(self, key_id: str, seen: int | None = None) -> bool:
        if self._gate.down:
            raise self._skipped()
        try:
            closed = await self._reset(
                keys=[self._br + key_id], args=[self._channel, key_id, -1 if seen is None else seen]
            )
        except RedisError as exc:
            raise self._failed(exc) from exc
        finally:
            self._mirror.changed(key_id)
        return bool(closed)

    async def claim_probe(self, key_id: str, trip_id: int, hold_s: float) -> bool:
        if self._gate.down:
            raise self._skipped()
        try:
            won = await self._probe(keys=[self._br + key_id], args=[trip_id, max(1, round(hold_s * 1000))])
        except RedisError as exc:
            raise self._failed(exc) from exc
        return bool(won)

    async def release_probe(self, key_id: str, trip_id: int) -> None:
        if self._gate.down:
            raise self._skipped()
        try:
            await self._release_probe(keys=[self._br + key_id], args=[trip_id])
        except RedisError as exc:
            raise self._failed(exc) from exc

    # -- key selection -------------------------------------------------------------------------------

    async def next_counter(self, name: str) -> int:
        if self._gate.down:
            raise self._skipped()
        try:
            return int(await self._redis.incr(self._rr + name))
        except RedisError as exc:
            raise self._failed(exc) from exc

    async def touch(self, name: str, member: str, at: float) -> None:
        if self._gate.down:
            raise self._skipped()
        try:
            await self._redis.zadd(self._lru + name, {member: at})
        except RedisError as exc:
            raise self._failed(exc) from exc

    async def least_recent(self, name: str, members: Sequence[str]) -> list[str]:
        if not members:
            return []
        if self._gate.down:
            raise self._skipped()
        try:
            scores = await self._redis.zmscore(self._lru + name, list(members))
        except RedisError as exc:
            raise self._failed(exc) from exc
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
        if self._gate.down:
            raise self._skipped()
        try:
            values = await self._pick(keys=keys)
        except RedisError as exc:
            raise self._failed(exc) from exc
        found = {
            key_id: scripts.decode_breaker(raw) for key_id, raw in zip(key_ids, values, strict=False) if raw
        }
        self._mirror.store(key_ids, found, generation)
        return found, int(values[-1])
