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

from relay.background import Backoff, Loop
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
        self._warned = False
        self._was_live = False
        # Resubscribing waits 0.1 s, doubling up to 5 s while it fails; reset once confirmed.
        self._watching = Loop(
            "relay-breaker-watch", self._subscribed, backoff=Backoff(0.1, 5.0), report=self._lost
        )

    def start(self) -> None:
        """Begin watching (idempotent; needs a running loop)."""
        self._watching.launch()

    async def _subscribed(self) -> None:
        """Hold one subscription until it fails; whenever it is not confirmed and healthy, the mirror
        is off (the loop resubscribes after its backoff)."""
        try:
            await self._once()
        finally:
            self._was_live = self._mirror.live  # read by the failure report, which runs after this
            self._mirror.reset_all(live=False)
        raise ConnectionResetError("the breaker subscription ended")

    def _lost(self, _name: str, exc: BaseException, _delay: float) -> None:
        if not isinstance(exc, (RedisError, OSError, TimeoutError)):
            # a driver bug must not end the watch for good: log it and resubscribe
            log.error("the breaker watch failed; resubscribing", exc_info=exc)
        elif self._was_live or not self._warned:
            log.warning(
                "breaker changes are not being received (%s: %s); reading breakers from Redis "
                "on every request until the subscription is back",
                type(exc).__name__,
                exc,
            )
            self._warned = True

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
                    self._watching.backoff.reset()
                    self._warned = False
                    log.info("breaker changes are being received; breaker reads are served from memory")
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    async def close(self) -> None:
        await self._watching.stop()
        await self._redis.aclose()
