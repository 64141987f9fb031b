"""Login throttling (SPEC §3.2's login, hardened): login attempts are counted per email and per client
address; past the limit the next attempt answers 429 with ``Retry-After`` before any password is hashed.

Reserve first, then verify: :meth:`LoginThrottle.attempt` counts the attempt atomically *before* the
password is compared (one synchronous step in this process; one ``reserve`` of ``window`` checks in the
shared state), so N concurrent guesses cannot all pass a check made before any of them was counted. An
attempt that turns out not to be a wrong guess gives its count back (:meth:`LoginThrottle.refund`; a
success: :meth:`LoginThrottle.succeeded`), so what stays counted is failures: a user who logs in
correctly is never slowed by someone else guessing; an attacker gets ``EMAIL_FAILURES`` guesses per
email and ``ADDRESS_FAILURES`` per address per ``WINDOW_S`` (argon2 already costs each guess tens of
milliseconds), however many they send at once. Callers that have no email (the dashboard's admin-token
sign-in) pass ``None`` and are counted per address only, so nobody can lock the operator out from
elsewhere by guessing under a fixed name.

Where the counts live:

- **In this process** always (:class:`LocalCounts`: a sliding window; a success clears that email's
  failures). Without ``RELAY_REDIS_URL`` (embedded mode, one replica) that is the whole throttle.
- **In the shared hot state** too when it is given (``RELAY_REDIS_URL``): every replica reserves its
  attempts in the same per-email and per-address counters (fixed ``WINDOW_S`` windows on Redis's
  clock), so N replicas together allow the limit once, not N times. A refund takes one back from the
  current window (a success does not clear the shared count of earlier failures; they end with their
  window). Email addresses are hashed in key names (no addresses at rest in Redis).
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
from dataclasses import dataclass

from relay.errors import RateLimited
from relay.state import LimitCheck, SharedState, StateUnavailable

log = logging.getLogger("relay.control.throttle")  # the name operators filter on; kept across moves

WINDOW_S = 300
EMAIL_FAILURES = 10
ADDRESS_FAILURES = 50
MAX_TRACKED = 100_000
#: At most one "Redis does not answer" warning per this many seconds.
WARN_EVERY_S = 60.0


#: One counter: ("email", normalised email) or ("address", client address).
Key = tuple[str, str]
Keys = tuple[Key, ...]


@dataclass(frozen=True, slots=True)
class Attempt:
    """A reserved login attempt: its counters, when this process counted it (a monotonic stamp that
    names it in the local counts), and whether the shared state counted it too (then a refund goes
    there as well)."""

    keys: Keys
    at: float
    shared: bool


def _message(kind: str) -> str:
    return f"too many failed logins for this {kind}; retry later"


class LocalCounts:
    """Attempts counted by this process (wrong guesses, and those still being verified), in a sliding
    window (the whole throttle on one replica)."""

    def __init__(self, window_s: float, limits: dict[str, int]) -> None:
        self._window = window_s
        self._limits = limits
        self._failures: OrderedDict[Key, deque[float]] = OrderedDict()

    def reserve(self, keys: Keys, now: float) -> None:
        """Count one attempt against every key, or raise :class:`RateLimited` (counting nothing) when one
        is at its limit in the window. Synchronous: no other request runs between the test and the add."""
        for key in keys:
            recent = self._recent(key, now)
            if recent is not None and len(recent) >= self._limits[key[0]]:
                retry = max(1.0, recent[0] + self._window - now)
                raise RateLimited(_message(key[0]), retry_after=retry)
        for key in keys:
            recent = self._recent(key, now)
            if recent is None:
                recent = self._failures[key] = deque()
            recent.append(now)
            self._failures.move_to_end(key)
        while len(self._failures) > MAX_TRACKED:
            self._failures.popitem(last=False)

    def refund(self, keys: Keys, at: float) -> None:
        """Take back the attempt counted at ``at`` (gone already if its window ended or it was evicted)."""
        for key in keys:
            recent = self._failures.get(key)
            if recent is None:
                continue
            try:
                recent.remove(at)
            except ValueError:
                continue
            if not recent:
                del self._failures[key]

    def forget(self, key: Key) -> None:
        self._failures.pop(key, None)

    def _recent(self, key: Key, now: float) -> deque[float] | None:
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
    def _keys(email: str | None, address: str) -> Keys:
        if email is None:
            return (("address", address),)
        return (("email", email.strip().lower()), ("address", address))

    def _shared_key(self, kind: str, value: str) -> str:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"login:{kind}:{digest}"

    async def attempt(self, email: str | None, address: str, now: float | None = None) -> Attempt:
        """Count one login attempt for ``email`` (``None``: none, the address alone) from ``address``,
        before anything is verified; raise :class:`RateLimited` (429, ``Retry-After``), counting
        nothing, when either has used up its attempts: in this process, or across every replica when
        the state is shared. The caller keeps the attempt if it was a wrong guess and otherwise gives
        it back with :meth:`refund` or :meth:`succeeded`."""
        keys = self._keys(email, address)
        stamp = time.monotonic() if now is None else now
        self._local.reserve(keys, stamp)
        if self._state is None:
            return Attempt(keys, stamp, shared=False)
        checks = [
            LimitCheck(self._shared_key(kind, value), "window", self._limits[kind], self._window)
            for kind, value in keys
        ]
        try:
            verdict = await self._state.reserve(checks, "", 0.0)
        except StateUnavailable as exc:
            self._warn(exc)  # the local counts above were the check
            return Attempt(keys, stamp, shared=False)
        if not verdict.admitted:
            self._local.refund(keys, stamp)
            kind = next(
                (k for (k, _v), c in zip(keys, checks, strict=True) if c.key == verdict.failed_key), ""
            )
            raise RateLimited(_message(kind), retry_after=max(1.0, verdict.retry_after))
        return Attempt(keys, stamp, shared=True)

    async def refund(self, attempt: Attempt) -> None:
        """Give back an attempt that was not a wrong guess (a success, a malformed request)."""
        self._local.refund(attempt.keys, attempt.at)
        if not attempt.shared or self._state is None:
            return
        try:
            await self._state.refund([(self._shared_key(k, v), self._window, 1) for k, v in attempt.keys])
        except StateUnavailable as exc:
            self._warn(exc)

    async def succeeded(self, attempt: Attempt) -> None:
        """A correct login: its attempt is given back, and this process forgets the email's failures
        (the shared window keeps earlier failures until it ends)."""
        await self.refund(attempt)
        for key in attempt.keys:
            if key[0] == "email":
                self._local.forget(key)

    def _warn(self, exc: StateUnavailable) -> None:
        now = time.monotonic()
        if now >= self._next_warning:
            self._next_warning = now + WARN_EVERY_S
            log.warning("login throttle counts in this process only: shared state unavailable (%s)", exc)
