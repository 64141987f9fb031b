"""``OutageGate``: after Redis failed to answer, stop waiting for it until a probe says it is back.

Why: a Redis that is frozen (SIGSTOP, a stalled VM, a black-holed network) does not refuse
connections, it just never answers, so every operation waits the full socket timeout. Without a gate
each request — and each step of it (rate limit, key pool) — paid that timeout again. With it, the
first timeout (or connection error) closes the gate; from then on every operation fails at once with
``StateUnavailable`` (the callers fail open, as documented) while one background task pings Redis, at
most once a second. When a ping is answered the gate runs its ``on_back`` hook (``RedisState``
re-sends the lease releases that failed meanwhile) and opens again. So a frozen Redis costs each
replica at most one timeout per second, spent by the probe, not by requests; the requests that were
already waiting on Redis when it froze each wait at most one timeout.

Only failures that say "no answer" close the gate (connection errors, timeouts, a pool that stayed
full for the whole timeout); an error *reply* from Redis (a script error, OOM) proves it answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from relay.background import DONE, Loop

log = logging.getLogger("relay.state")

#: The probe pings at most this often while Redis does not answer.
PROBE_EVERY_S = 1.0


class OutageGate:
    """``down`` is True from the first unanswered operation until a probe is answered."""

    def __init__(
        self,
        probe: Callable[[], Awaitable[object]],
        on_back: Callable[[], Awaitable[None]],
        *,
        every_s: float = PROBE_EVERY_S,
    ) -> None:
        self._probe = probe
        self._on_back = on_back
        self._every_s = every_s
        self.down = False
        self.since = 0.0  # time.monotonic() when it closed
        self._probing = Loop("relay-redis-probe", self._probe_once)

    def close_gate(self, reason: str) -> None:
        """An operation got no answer: fail the next ones at once and start probing (idempotent)."""
        if self.down:
            return
        self.down = True
        self.since = time.monotonic()
        log.warning(
            "Redis did not answer (%s); shared-state operations fail at once until a probe (at most one "
            "per %g s) gets an answer",
            reason,
            self._every_s,
        )
        self._probing.launch()

    async def _probe_once(self) -> object:
        """One probe; the next starts ``every_s`` after this one started (a probe that waited its
        timeout is not followed by a full second more). Ends the loop once Redis answered."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await self._probe()
            await self._on_back()
        except Exception as exc:  # the expected answer while Redis is away: not a loop failure
            log.debug("Redis probe failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(max(0.0, self._every_s - (loop.time() - started)))
            return None
        self.down = False
        log.info("Redis answers again after %.1f s; using it again", time.monotonic() - self.since)
        return DONE

    async def close(self) -> None:
        await self._probing.stop()
