"""What a hot-path step does when shared state does not answer: it fails *open*, and says so rarely.

What it does. :class:`FailOpen` is the one guard the rate limiter and the key pool keep around their
``SharedState`` calls: after a ``StateUnavailable`` the step skips the store for ``cooldown_s`` (a
black-holed Redis then costs one timeout per second, not one per request), and a warning naming what
is no longer enforced is logged at most once per ``warn_every_s``, with how many occurrences it
swallowed since the last one. ``on_fail_open(phase)`` (optional) sees every occurrence — wire it to a
metric.

What it deliberately does not know. What the step does instead (admit the request, use pool order):
the step decides; the guard only keeps time and speaks.

Invariants. One guard per step per process; ``failed`` never raises; ``skipping`` costs one clock
read only while a cooldown is set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from relay.state import StateUnavailable

#: After the state store failed, the step skips it for this long (fails open at once).
STATE_COOLDOWN_S = 1.0
#: At most one "failing open" warning per this many seconds (``on_fail_open`` still sees every one).
WARN_EVERY_S = 60.0


class FailOpen:
    """``unenforced``: what stops holding (``"rate limits are not enforced"``); ``instead``: what the
    step does meanwhile (``"admitting requests"``)."""

    def __init__(
        self,
        log: logging.Logger,
        unenforced: str,
        instead: str,
        *,
        on_fail_open: Callable[[str], None] | None = None,
    ) -> None:
        self._log = log
        self._message = (
            f"{unenforced}: shared state unavailable at %s (%s); {instead} (%d more since the last warning)"
        )
        self._on_fail_open = on_fail_open
        self._skip_state_until = 0.0
        self._next_warning = 0.0
        self._suppressed = 0

    def skipping(self) -> bool:
        """Is the store in its cooldown after a failure (then the caller calls :meth:`failed` with
        ``None`` and goes on without it)?"""
        return bool(self._skip_state_until) and time.monotonic() < self._skip_state_until

    def failed(self, phase: str, exc: StateUnavailable | None) -> None:
        """The store failed at ``phase`` (``exc``), or was skipped in its cooldown (``None``)."""
        now = time.monotonic()
        if exc is not None:
            self._skip_state_until = now + STATE_COOLDOWN_S
        if self._on_fail_open is not None:
            self._on_fail_open(phase)
        if now < self._next_warning:
            self._suppressed += 1
            return
        self._next_warning = now + WARN_EVERY_S
        self._log.warning(
            self._message,
            phase,
            exc if exc is not None else "cooling down after an earlier failure",
            self._suppressed,
        )
        self._suppressed = 0
