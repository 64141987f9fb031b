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
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

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
        self._task: asyncio.Task[None] | None = None

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
        self._task = asyncio.get_running_loop().create_task(self._run(), name="relay-redis-probe")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self._probe()
                await self._on_back()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("Redis probe failed: %s: %s", type(exc).__name__, exc)
                await asyncio.sleep(max(0.0, self._every_s - (loop.time() - started)))
                continue
            self.down = False
            log.info("Redis answers again after %.1f s; using it again", time.monotonic() - self.since)
            return

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
