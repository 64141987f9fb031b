"""Login throttling (SPEC §3.2's login, hardened): failed logins are counted per email and per client
address; past the limit the next attempt answers 429 with ``Retry-After`` before any password is hashed.

Why failures only: a user who logs in correctly is never slowed by someone else guessing; an attacker
gets ``EMAIL_FAILURES`` guesses per email and ``ADDRESS_FAILURES`` per address per ``WINDOW_S`` (argon2
already costs each guess tens of milliseconds).

Where the counts live:

- **In this process** always (:class:`LocalCounts`: a sliding window; a success clears that email's
  failures). Without ``RELAY_REDIS_URL`` (embedded mode, one replica) that is the whole throttle.
- **In the shared hot state** too when it is given (``RELAY_REDIS_URL``): every replica adds its failures
  to the same per-email and per-address counters (fixed ``WINDOW_S`` windows on Redis's clock), so N
  replicas together allow the limit once, not N times. The shared state has no delete, so a success
  does not clear the shared count; it ends with its window. Email addresses are hashed in key names (no
  addresses at rest in Redis).
- **When Redis does not answer** (``StateUnavailable``, including the outage gate failing at once), the
  throttle falls back to this process's own counts — neither fail-open (an outage, or an attacker able
  to cause one, would lift the limit entirely) nor fail-closed (a Redis outage would lock every user
  and the dashboard's admin-token sign-in out of the control plane, the very place an operator repairs
  things). So during an outage each replica enforces the limit on what it saw itself: at worst N × the
  limit, as before shared counting. A warning is logged at most once a minute.

What it deliberately does not know: passwords, users, HTTP. Memory is bounded: the local counts keep
at most ``MAX_TRACKED`` keys, the oldest forgotten first; shared counters expire with their window.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict, deque

from relay.errors import RateLimited
from relay.state import LimitCheck, SharedState, StateUnavailable

log = logging.getLogger("relay.control.throttle")

WINDOW_S = 300
EMAIL_FAILURES = 10
ADDRESS_FAILURES = 50
MAX_TRACKED = 100_000
#: At most one "Redis does not answer" warning per this many seconds.
WARN_EVERY_S = 60.0


def _message(kind: str) -> str:
    return f"too many failed logins for this {kind}; retry later"


class LocalCounts:
    """Failures seen by this process, in a sliding window (the whole throttle on one replica)."""

    def __init__(self, window_s: float, limits: dict[str, int]) -> None:
        self._window = window_s
        self._limits = limits
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def check(self, keys: tuple[tuple[str, str], ...], now: float) -> None:
        """Raise :class:`RateLimited` when either key is over its limit in the window."""
        for key in keys:
            recent = self._recent(key, now)
            if recent is not None and len(recent) >= self._limits[key[0]]:
                retry = max(1.0, recent[0] + self._window - now)
                raise RateLimited(_message(key[0]), retry_after=retry)

    def failed(self, keys: tuple[tuple[str, str], ...], now: float) -> None:
        for key in keys:
            recent = self._recent(key, now)
            if recent is None:
                recent = self._failures[key] = deque()
            recent.append(now)
            self._failures.move_to_end(key)
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)

    def forget(self, key: tuple[str, str]) -> None:
        self._failures.pop(key, None)

    def _recent(self, key: tuple[str, str], now: float) -> deque[float] | None:
        recent = self._failures.get(key)
        if recent is None:
            return None
        while recent and recent[0] <= now - self._window:
            recent.popleft()
        if not recent:
            del self._failures[key]
            return None
        return recent


class LoginThrottle:
    """One per process (built in ``boot``), shared by ``POST /api/auth/login`` and the dashboard's
    sign-in. ``state``: the shared hot state when replicas share one (``RELAY_REDIS_URL``), else None."""

    def __init__(
        self,
        state: SharedState | None = None,
        *,
        window_s: int = WINDOW_S,
        email_failures: int = EMAIL_FAILURES,
        address_failures: int = ADDRESS_FAILURES,
    ) -> None:
        self._state = state
        self._window = window_s
        self._limits = {"email": email_failures, "address": address_failures}
        self._local = LocalCounts(window_s, self._limits)
        self._next_warning = 0.0

    @staticmethod
    def _keys(email: str, address: str) -> tuple[tuple[str, str], ...]:
        return (("email", email.strip().lower()), ("address", address))

    def _shared_key(self, kind: str, value: str) -> str:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"login:{kind}:{digest}"

    async def check(self, email: str, address: str, now: float | None = None) -> None:
        """Raise :class:`RateLimited` (429, ``Retry-After``) when the email or the address has used up
        its failures: in this process, or across every replica when the state is shared."""
        keys = self._keys(email, address)
        self._local.check(keys, time.monotonic() if now is None else now)
        if self._state is None:
            return
        checks = [
            LimitCheck(self._shared_key(kind, value), "window_peek", self._limits[kind], self._window)
            for kind, value in keys
        ]
        try:
            verdict = await self._state.reserve(checks, "", 0.0)
        except StateUnavailable as exc:
            self._warn(exc)  # the local counts above were the check
            return
        if not verdict.admitted:
            kind = "email" if verdict.failed_key == checks[0].key else "address"
            raise RateLimited(_message(kind), retry_after=max(1.0, verdict.retry_after))

    async def failed(self, email: str, address: str, now: float | None = None) -> None:
        """Count one failed attempt against the email and the address."""
        keys = self._keys(email, address)
        self._local.failed(keys, time.monotonic() if now is None else now)
        if self._state is None:
            return
        adds = [(self._shared_key(kind, value), self._window, 1) for kind, value in keys]
        try:
            await self._state.commit(adds, (), "")
        except StateUnavailable as exc:
            self._warn(exc)

    async def succeeded(self, email: str) -> None:
        """A correct login clears this process's failures of that email (not the shared window's)."""
        self._local.forget(self._keys(email, "")[0])

    def _warn(self, exc: StateUnavailable) -> None:
        now = time.monotonic()
        if now >= self._next_warning:
            self._next_warning = now + WARN_EVERY_S
            log.warning("login throttle counts in this process only: shared state unavailable (%s)", exc)
