"""``BreakerWatch``: the subscription that keeps a :class:`relay.state.mirror.BreakerMirror` honest.

Every trip and reset publishes the key id on ``<prefix>breakers`` (from inside its script). The watch
subscribes on a connection of its own and drops the mirror's entry of every key it hears about;
whenever the subscription is not confirmed and healthy, the mirror is off and every breaker read goes
to Redis. It never reconnects behind the mirror's back (notifications sent while it was down are
lost), pings after ``_WATCH_PING_S`` of silence, and gives up on a connection that stayed silent,
pong included, for ``_WATCH_DEAD_S``; then it resubscribes with a backoff of 0.1 s doubling to 5 s.
See docs/state.md, "The breaker mirror".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from relay.state.mirror import BreakerMirror

_WATCH_PING_S = 1.0
_WATCH_DEAD_S = 3.0

log = logging.getLogger("relay.state")


class BreakerWatch:
    def __init__(
        self, url: str, channel: str, mirror: BreakerMirror, *, prefix: str, timeout_s: float
    ) -> None:
        self._redis: Redis = Redis.from_url(
            url,
            decode_responses=True,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
            client_name=prefix + "breaker-watch",  # what CLIENT LIST shows for it
        )
        self._channel = channel
        self._mirror = mirror
        self._task: asyncio.Task[None] | None = None
        self._backoff = 0.1  # seconds before resubscribing; doubles up to 5 s while it fails
        self._warned = False

    def start(self) -> None:
        """Begin watching (idempotent; needs a running loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="relay-breaker-watch")

    async def _run(self) -> None:
        """Keep the subscription; whenever it is not confirmed and healthy, the mirror is off."""
        while True:
            try:
                await self._once()
            except (RedisError, OSError, TimeoutError) as exc:
                if self._mirror.live or not self._warned:
                    log.warning(
                        "breaker changes are not being received (%s: %s); reading breakers from Redis "
                        "on every request until the subscription is back",
                        type(exc).__name__,
                        exc,
                    )
                    self._warned = True
            except Exception:  # a driver bug must not end the watch for good: log it and resubscribe
                log.exception("the breaker watch failed; resubscribing")
            finally:
                self._mirror.reset_all(live=False)
            await asyncio.sleep(self._backoff)
            self._backoff = min(self._backoff * 2, 5.0)

    async def _once(self) -> None:
        loop = asyncio.get_running_loop()
        pubsub = self._redis.pubsub()
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
                    self._backoff = 0.1
                    self._warned = False
                    log.info("breaker changes are being received; breaker reads are served from memory")
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._redis.aclose()
