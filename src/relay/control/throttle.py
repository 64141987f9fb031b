"""Login throttling (SPEC §3.2's login, hardened): failed logins are counted per email and per client
address; past the limit the next attempt answers 429 with ``Retry-After`` before any password is hashed.

Why failures only: a user who logs in correctly is never slowed by someone else guessing; an attacker
gets ``EMAIL_FAILURES`` guesses per email and ``ADDRESS_FAILURES`` per address per ``WINDOW_S`` (argon2
already costs each guess tens of milliseconds). A success clears that email's failures.

What it deliberately does not know: passwords, users, HTTP. State is per process (per replica): N
replicas behind a balancer allow up to N times the limit, which still turns an unbounded online guessing
rate into a few per minute. Memory is bounded: at most ``MAX_TRACKED`` keys, the oldest forgotten first.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque

from relay.errors import RateLimited

WINDOW_S = 300.0
EMAIL_FAILURES = 10
ADDRESS_FAILURES = 50
MAX_TRACKED = 100_000


class LoginThrottle:
    def __init__(
        self,
        *,
        window_s: float = WINDOW_S,
        email_failures: int = EMAIL_FAILURES,
        address_failures: int = ADDRESS_FAILURES,
    ) -> None:
        self._window = window_s
        self._limits = {"email": email_failures, "address": address_failures}
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def check(self, email: str, address: str, now: float | None = None) -> None:
        """Raise :class:`RateLimited` when either key is over its limit in the window."""
        current = time.monotonic() if now is None else now
        for key in (("email", email.strip().lower()), ("address", address)):
            recent = self._recent(key, current)
            if recent is not None and len(recent) >= self._limits[key[0]]:
                retry = max(1.0, recent[0] + self._window - current)
                raise RateLimited(f"too many failed logins for this {key[0]}; retry later", retry_after=retry)

    def failed(self, email: str, address: str, now: float | None = None) -> None:
        current = time.monotonic() if now is None else now
        for key in (("email", email.strip().lower()), ("address", address)):
            recent = self._recent(key, current)
            if recent is None:
                recent = self._failures[key] = deque()
            recent.append(current)
            self._failures.move_to_end(key)
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)

    def succeeded(self, email: str) -> None:
        self._failures.pop(("email", email.strip().lower()), None)

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
