"""Host-key selection and circuit breakers on the hot path (SPEC §6).

What it does: given the plan's keys for one host (pool order, already filtered to enabled keys that
have a value), returns the keys to try, in order — at most ``min(3, len(keys))``, never one whose
breaker is open — and records how each attempt went on that key's breaker. :func:`classify` turns an
upstream status (and ``Retry-After``) into the :class:`Failure` the breaker needs, or ``None`` for a
response that goes back to the caller as it is.

What it deliberately does not know: HTTP clients, adapters, rate limits, when the first byte reached
the caller (the pipeline only fails over before it). Breaker records live in
:class:`relay.state.SharedState`, so every replica sees the same breakers when Redis is configured.

Invariants and costs (state calls per request, before the upstream call):

- ``prioritized``: one (``breakers``); ``round_robin``: one (``pick_state``: breakers + counter);
  ``least_recently_used``: two (``breakers``, then ``least_recent``), plus one ``touch`` after a
  success. With Redis, a started ``RedisState`` answers ``breakers`` from its mirror without a round
  trip while its change notifications hold (``relay.state.mirror``), so ``prioritized`` usually costs
  none, ``round_robin`` one ``INCR`` and ``least_recently_used`` one read plus the ``touch``;
- ``succeeded`` costs nothing unless the key had a breaker record when last seen (then one ``reset``);
  ``failed`` costs one ``trip`` for a tripping failure and nothing for a short 429;
- a record is open iff its ``version`` is the key's and (``open_until`` is ``None`` — auth failure,
  open until the key is edited — or in the future); a record whose time is up is half-open and the
  key is eligible again; a record of an older version is ignored;
- shared state down fails *open*: no breakers, pool order; a warning at most once a minute.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from relay.catalog import HostKey, Policy
from relay.errors import Unavailable
from relay.state import BreakerRecord, SharedState, StateUnavailable

log = logging.getLogger("relay.keypool")

#: SPEC §6: a request tries at most this many keys of its host.
MAX_ATTEMPTS = 3
#: A 429 whose Retry-After is at most this many seconds does not trip the breaker: just fail over.
SHORT_RETRY_AFTER_S = 5.0
#: After the state store failed, selection skips it for this long (pool order, no breakers).
STATE_COOLDOWN_S = 1.0
WARN_EVERY_S = 60.0

FailureKind = Literal["auth", "rate_limited_short", "rate_limited", "server", "connection"]

_REASONS: dict[str, str] = {
    "auth": "upstream_auth_failed",
    "rate_limited": "upstream_rate_limited",
    "server": "upstream_5xx",
    "connection": "upstream_connection_failed",
}


@dataclass(frozen=True, slots=True)
class Failure:
    """How one upstream attempt failed, for the breaker. ``status`` is 0 for a connection error."""

    kind: FailureKind
    status: int
    retry_after: float | None

    @property
    def trips(self) -> bool:
        """Does this failure open the key's breaker? Only a short 429 does not."""
        return self.kind != "rate_limited_short"


_CONNECTION = Failure("connection", 0, None)


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delay-seconds or an HTTP date; ``None`` if absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:  # "-0000" parses naive; HTTP dates are always GMT
            return None
        seconds = when.timestamp() - time.time()
    if seconds != seconds or seconds == float("inf"):  # NaN, inf
        return None
    return max(0.0, seconds)


def classify(status: int | None, retry_after_header: str | None) -> Failure | None:
    """The breaker's view of one upstream answer; ``None`` means "return it to the caller as is".

    ``None`` status is a connection error after connect. 401/403 → ``auth``. 429 with ``Retry-After``
    ≤ 5 s → ``rate_limited_short`` (fail over, no trip); longer → ``rate_limited`` (open for that
    long). A 429 without a usable ``Retry-After`` is ``rate_limited`` with ``retry_after=None``: the
    upstream gave no hint, so the breaker uses the 5xx backoff ladder (1, 2, 4 … 60 s) rather than
    guessing a fixed pause. 5xx → ``server``. Anything else (2xx, 400, 404, 422 …) → ``None``.
    """
    if status is None:
        return _CONNECTION
    if status == 401 or status == 403:
        return Failure("auth", status, None)
    if status == 429:
        retry_after = parse_retry_after(retry_after_header)
        if retry_after is not None and retry_after <= SHORT_RETRY_AFTER_S:
            return Failure("rate_limited_short", 429, retry_after)
        return Failure("rate_limited", 429, retry_after)
    if 500 <= status <= 599:
        return Failure("server", status, None)
    return None


def _is_open(record: BreakerRecord | None, key: HostKey, now: float) -> bool:
    if record is None or record.version != key.version:
        return False
    return record.open_until is None or record.open_until > now


class KeyPool:
    """Selection and breakers over :class:`relay.state.SharedState` (one per process, built in boot)."""

    def __init__(self, state: SharedState) -> None:
        self._state = state
        # Ids of keys whose breaker had a record when last read (or that we tripped since): only those
        # need a ``reset`` on success, so the common case (nothing open) costs no round trip.
        self._with_records: set[str] = set()
        self._skip_state_until = 0.0
        self._next_warning = 0.0
        self._suppressed = 0

    async def candidates(self, policy: Policy, keys: Sequence[HostKey], host_name: str) -> list[HostKey]:
        """The keys to try, in order: at most ``min(3, len(keys))``, none with an open breaker.

        Raises ``Unavailable`` (``no_healthy_keys``) when every key's breaker is open, and
        (``no_keys``) when ``keys`` is empty (the router normally refuses that case first).
        """
        if not keys:
            raise Unavailable(f'no enabled keys for host "{host_name}"', code="no_keys")
        ids = [key.id for key in keys]
        strategy = policy.key_selection
        records: dict[str, BreakerRecord] = {}
        counter: int | None = None
        answered = True
        if not (self._skip_state_until and time.monotonic() < self._skip_state_until):
            try:
                if strategy == "round_robin":
                    records, counter = await self._state.pick_state(ids, _counter_name(policy, keys[0]))
                else:
                    records = await self._state.breakers(ids)
            except StateUnavailable as exc:
                self._failed_open("candidates", exc)
                answered = False
        else:
            self._failed_open("candidates", None)
            answered = False
        if answered:
            self._remember(ids, records)
        if records:
            now = time.time()
            eligible = [key for key in keys if not _is_open(records.get(key.id), key, now)]
            if not eligible:
                raise Unavailable(f'no healthy keys for host "{host_name}"', code="no_healthy_keys")
        else:
            eligible = list(keys)
        if counter is not None and len(eligible) > 1:
            start = (counter - 1) % len(eligible)
            eligible = eligible[start:] + eligible[:start]
        elif strategy == "least_recently_used" and answered and len(eligible) > 1:
            eligible = await self._least_recent(eligible)
        return eligible[:MAX_ATTEMPTS]

    async def succeeded(self, key: HostKey, policy: Policy) -> None:
        """Close the key's breaker if it had a record (a half-open key recovered); LRU: note the use."""
        try:
            if key.id in self._with_records:
                self._with_records.discard(key.id)
                await self._state.reset(key.id)
            if policy.key_selection == "least_recently_used":
                await self._state.touch(_lru_name(key), key.id, time.time())
        except StateUnavailable as exc:
            self._failed_open("succeeded", exc)

    async def failed(self, key: HostKey, failure: Failure) -> None:
        """Open the key's breaker as ``failure`` demands (a short 429 does not trip: nothing is sent)."""
        if not failure.trips:
            return
        self._with_records.add(key.id)
        reason = _REASONS[failure.kind]
        try:
            if failure.kind == "auth":
                await self._state.trip(key.id, reason=reason, version=key.version, permanent=True)
            elif failure.kind == "rate_limited" and failure.retry_after is not None:
                await self._state.trip(
                    key.id, reason=reason, version=key.version, retry_after=failure.retry_after
                )
            else:
                await self._state.trip(key.id, reason=reason, version=key.version)
        except StateUnavailable as exc:
            self._failed_open("failed", exc)

    async def _least_recent(self, eligible: list[HostKey]) -> list[HostKey]:
        try:
            order = await self._state.least_recent(_lru_name(eligible[0]), [key.id for key in eligible])
        except StateUnavailable as exc:
            self._failed_open("candidates", exc)
            return eligible
        by_id = {key.id: key for key in eligible}
        return [by_id[key_id] for key_id in order]

    def _remember(self, ids: list[str], records: dict[str, BreakerRecord]) -> None:
        if records:
            self._with_records.update(records)
        if self._with_records:
            self._with_records.difference_update([key_id for key_id in ids if key_id not in records])

    def _failed_open(self, phase: str, exc: StateUnavailable | None) -> None:
        now = time.monotonic()
        if exc is not None:
            self._skip_state_until = now + STATE_COOLDOWN_S
        if now < self._next_warning:
            self._suppressed += 1
            return
        self._next_warning = now + WARN_EVERY_S
        log.warning(
            "host-key breakers are not shared: shared state unavailable at %s (%s); using pool order "
            "without breakers (%d more since the last warning)",
            phase,
            exc if exc is not None else "cooling down after an earlier failure",
            self._suppressed,
        )
        self._suppressed = 0


def _counter_name(policy: Policy, key: HostKey) -> str:
    # Per policy and host, by id: stable across renames, reloads and replicas.
    return f"{policy.id}:{key.host_id}"


def _lru_name(key: HostKey) -> str:
    # Last use is a property of the upstream key (its load), so it is kept per host, not per policy:
    # two policies sharing a key see each other's use of it.
    return key.host_id
