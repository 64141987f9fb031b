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
- ``succeeded`` costs nothing unless the request was a half-open probe (then one ``reset``);
  ``failed`` costs one ``trip`` for a tripping failure and nothing for a short 429; ``begin`` costs
  nothing for a closed key and one ``claim_probe`` for a half-open one;
- a record is open iff its ``version`` is the key's and (``open_until`` is ``None`` — auth failure,
  open until the key is edited — or in the future); a record whose time is up is half-open: the key
  is eligible again, but only the one request that claims its probe may try it (SPEC §6);
- the backoff step counts trips: ``failed``/``succeeded`` carry the opening the request saw when it
  chose the key (:class:`Selection`), and the store ignores outcomes of requests sent before the
  key's current state (the failures of requests in flight when it opened, a late success);
- shared state down fails *open*: no breakers, pool order; a warning at most once a minute;
- a host's ``breaker`` tuning (SPEC §6) is applied by the store inside ``trip``: below its threshold a
  5xx or connection failure opens nothing (and costs the same one ``trip``);
- every opening and every closing is logged exactly once, by the request whose ``trip`` wrote the
  opening or whose ``reset`` deleted it (the store says which), naming the host and key by name.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from relay.domain.breaker import DEFAULT_TUNING
from relay.errors import Unavailable
from relay.request.fail_open import FailOpen
from relay.snapshot import Host, HostKey, Policy
from relay.state import BreakerRecord, SharedState, StateUnavailable

log = logging.getLogger("relay.keypool")

#: SPEC §6: a request tries at most this many keys of its host.
MAX_ATTEMPTS = 3
#: A 429 whose Retry-After is at most this many seconds does not trip the breaker: just fail over.
SHORT_RETRY_AFTER_S = 5.0
#: After losing a probe claim, this replica asks the store again for that opening after this long at
#: the soonest (the probe usually ends first: its trip or reset changes the record and the claim).
PROBE_RECHECK_S = 1.0

#: A batch item waiting on keys that are open until edited (auth failures) looks again this often.
PERMANENT_RECHECK_S = 5.0

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


@dataclass(slots=True)
class Selection:
    """The keys one request may try, in order (all eligible ones: the caller stops after three tries),
    and the opening each half-open one is in (``half_open``: key id → ``trip_id``). A key absent from
    ``half_open`` was closed when chosen. Pass it back to :meth:`KeyPool.begin`, ``failed`` and
    ``succeeded`` so the breaker can tell this request's outcome from those of requests sent earlier."""

    keys: list[HostKey]
    half_open: dict[str, int]

    def seen(self, key: HostKey) -> int:
        return self.half_open.get(key.id, 0)


class KeyPool:
    """Selection and breakers over :class:`relay.state.SharedState` (one per process, built in boot).

    ``probe_hold_s`` is how long a half-open probe is held at most (keep it at the request's deadline:
    a probe that is still running must not let a second one through; one whose process died must not
    block the key much longer).
    """

    def __init__(self, state: SharedState, *, probe_hold_s: float = 305.0) -> None:
        self._state = state
        self._probe_hold_s = probe_hold_s
        # key id -> (trip_id, monotonic until): another request holds that opening's probe; asking the
        # store again before ``until`` would only cost a round trip per request while the probe runs.
        self._probe_busy: dict[str, tuple[int, float]] = {}
        self._fail_open = FailOpen(
            log, "host-key breakers are not shared", "using pool order without breakers"
        )

    async def candidates(self, policy: Policy, keys: Sequence[HostKey], host_name: str) -> list[HostKey]:
        """The keys to try, in order: at most ``min(3, len(keys))``, none with an open breaker (see
        :meth:`select`, which the pipeline uses)."""
        return (await self.select(policy, keys, host_name)).keys[:MAX_ATTEMPTS]

    async def select(self, policy: Policy, keys: Sequence[HostKey], host_name: str) -> Selection:
        """Every key whose breaker is not open, in the order to try them; half-open keys are included
        (whether this request may probe one is decided by :meth:`begin`, just before it is sent).

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
        if not self._fail_open.skipping():
            try:
                if strategy == "round_robin":
                    records, counter = await self._state.pick_state(ids, _counter_name(policy, keys[0]))
                else:
                    records = await self._state.breakers(ids)
            except StateUnavailable as exc:
                self._fail_open.failed("candidates", exc)
                answered = False
        else:
            self._fail_open.failed("candidates", None)
            answered = False
        half_open: dict[str, int] = {}
        if records:
            now = time.time()
            eligible = []
            for key in keys:
                record = records.get(key.id)
                if record is None or record.version != key.version:
                    eligible.append(key)
                elif not _is_open(record, key, now):
                    eligible.append(key)
                    half_open[key.id] = record.trip_id
            if not eligible:
                raise Unavailable(f'no healthy keys for host "{host_name}"', code="no_healthy_keys")
        else:
            eligible = list(keys)
        if counter is not None and len(eligible) > 1:
            start = (counter - 1) % len(eligible)
            eligible = eligible[start:] + eligible[:start]
        elif strategy == "least_recently_used" and answered and len(eligible) > 1:
            eligible = await self._least_recent(eligible)
        return Selection(eligible, half_open)

    async def reopens_in(self, keys: Sequence[HostKey]) -> float:
        """Seconds until some key of ``keys`` may be tried: 0 when one is closed or half-open with no
        probe this replica knows to be in flight; else the soonest end of an opening (a key open until
        it is edited counts as :data:`PERMANENT_RECHECK_S`) or of a probe's recheck. For batch items
        that wait instead of failing ``no healthy keys`` (SPEC §17); one ``breakers`` read (usually the
        mirror). A store that does not answer: 0 (the pipeline fails open the same way)."""
        if not keys:
            return 0.0
        try:
            records = await self._state.breakers([key.id for key in keys])
        except StateUnavailable:
            return 0.0
        now, clock = time.time(), time.monotonic()
        soonest = PERMANENT_RECHECK_S
        for key in keys:
            record = records.get(key.id)
            if record is None or record.version != key.version:
                return 0.0
            if _is_open(record, key, now):
                if record.open_until is not None:
                    soonest = min(soonest, record.open_until - now)
                continue
            busy = self._probe_busy.get(key.id)
            if busy is None or busy[0] != record.trip_id or clock >= busy[1]:
                return 0.0
            soonest = min(soonest, busy[1] - clock)
        return max(soonest, 0.0)

    async def begin(self, key: HostKey, selection: Selection) -> bool:
        """May this request send to ``key`` now? Always for a closed key (no cost). For a half-open
        key only if it takes the probe: at most one request per opening is in flight (SPEC §6); the
        others skip the key (fail over, or ``no_healthy_keys``). A store that does not answer: yes."""
        trip_id = selection.half_open.get(key.id)
        if trip_id is None:
            return True
        now = time.monotonic()
        busy = self._probe_busy.get(key.id)
        if busy is not None and busy[0] == trip_id and now < busy[1]:
            return False
        try:
            won = await self._state.claim_probe(key.id, trip_id, self._probe_hold_s)
        except StateUnavailable as exc:
            self._fail_open.failed("probe", exc)
            return True
        if won:
            self._probe_busy.pop(key.id, None)
        else:
            if len(self._probe_busy) > 10_000:
                self._probe_busy.clear()
            self._probe_busy[key.id] = (trip_id, now + PROBE_RECHECK_S)
        return won

    async def succeeded(self, key: HostKey, policy: Policy, seen: int = 0, host: Host | None = None) -> bool:
        """Close the key's breaker if this request was its half-open probe (``seen``: the opening it
        saw, from :meth:`Selection.seen`); a success of a request that chose the key while it was
        closed costs nothing. LRU: note the use. True when this call closed the breaker (logged)."""
        closed = False
        try:
            if seen:
                closed = await self._state.reset(key.id, seen)
                if closed:
                    _log_closed(key, host, seen)
            if policy.key_selection == "least_recently_used":
                await self._state.touch(_lru_name(key), key.id, time.time())
        except StateUnavailable as exc:
            self._fail_open.failed("succeeded", exc)
        return closed

    async def failed(
        self, key: HostKey, failure: Failure, seen: int | None = 0, host: Host | None = None
    ) -> BreakerRecord | None:
        """Open the key's breaker as ``failure`` demands (a short 429 does not trip: nothing is sent),
        under ``host``'s breaker tuning (SPEC §6; none given: the untuned breaker).

        ``seen`` is the opening the request saw when it chose the key (0: closed): a 5xx or connection
        failure only opens the key (or raises its step) if nobody changed the breaker since, so the
        failures of requests that were in flight when it opened count for nothing. ``None``: always.
        Returns the key's breaker record after this failure (``opened`` set when this call opened or
        reopened it: that call logs the opening), or ``None`` when the key is still closed (below the
        host's threshold, or shared state did not answer).
        """
        if not failure.trips:
            if seen:  # a probe that neither trips nor closes the key gives the probe back
                await self.release(key, seen)
            return None
        reason = _REASONS[failure.kind]
        tuning = host.breaker if host is not None else DEFAULT_TUNING
        try:
            if failure.kind == "auth":
                record = await self._state.trip(key.id, reason=reason, version=key.version, permanent=True)
            elif failure.kind == "rate_limited" and failure.retry_after is not None:
                record = await self._state.trip(
                    key.id, reason=reason, version=key.version, retry_after=failure.retry_after
                )
            else:
                record = await self._state.trip(
                    key.id, reason=reason, version=key.version, seen=seen, tuning=tuning
                )
        except StateUnavailable as exc:
            self._fail_open.failed("failed", exc)
            return None
        if record is not None and record.opened:
            _log_opened(key, host, record)
        return record

    async def release(self, key: HostKey, seen: int) -> None:
        """Give back the half-open probe of opening ``seen`` (see ``State.release_probe``)."""
        try:
            await self._state.release_probe(key.id, seen)
        except StateUnavailable as exc:
            self._fail_open.failed("release", exc)

    async def _least_recent(self, eligible: list[HostKey]) -> list[HostKey]:
        try:
            order = await self._state.least_recent(_lru_name(eligible[0]), [key.id for key in eligible])
        except StateUnavailable as exc:
            self._fail_open.failed("candidates", exc)
            return eligible
        by_id = {key.id: key for key in eligible}
        return [by_id[key_id] for key_id in order]


def _log_opened(key: HostKey, host: Host | None, record: BreakerRecord) -> None:
    """The one line per opening (SPEC §6): host and key by name, why, and for how long."""
    open_for = None if record.open_until is None else round(max(0.0, record.open_until - time.time()), 3)
    log.warning(
        'breaker opened: key "%s" of host "%s" (%s), %s',
        key.name,
        host.name if host is not None else key.host_id,
        record.reason,
        "until the key is edited" if open_for is None else f"for {open_for:g} s",
        extra={
            "event": "breaker_opened",
            "host": host.name if host is not None else None,
            "host_key_name": key.name,
            "host_key_id": key.id,
            "reason": record.reason,
            "open_for_s": open_for,
            "step": record.failures,
        },
    )


def _log_closed(key: HostKey, host: Host | None, trip_id: int) -> None:
    """The one line per closing: the probe that closed it succeeded; ``open_for_s`` is how long the key
    had been open since the opening the probe was sent in (its ``trip_id`` is that opening's time, ms)."""
    open_for = round(max(0.0, time.time() - trip_id / 1000), 3)
    log.info(
        'breaker closed: key "%s" of host "%s" answered again after %g s open',
        key.name,
        host.name if host is not None else key.host_id,
        open_for,
        extra={
            "event": "breaker_closed",
            "host": host.name if host is not None else None,
            "host_key_name": key.name,
            "host_key_id": key.id,
            "reason": "probe_succeeded",
            "open_for_s": open_for,
        },
    )


def _counter_name(policy: Policy, key: HostKey) -> str:
    # Per policy and host, by id: stable across renames, reloads and replicas.
    return f"{policy.id}:{key.host_id}"


def _lru_name(key: HostKey) -> str:
    # Last use is a property of the upstream key (its load), so it is kept per host, not per policy:
    # two policies sharing a key see each other's use of it.
    return key.host_id
