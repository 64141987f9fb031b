"""The shared hot state seam: one Protocol, its value types, and the rules both twins share.

Rate-limit counters, concurrency leases, circuit breakers and key-selection counters live behind
:class:`SharedState`. ``MemoryState`` keeps them in this process (correct for one replica);
``RedisState`` keeps them in Redis so every replica sees the same numbers (SPEC §1, §5, §6).

This module deliberately knows nothing about policies, meters, host keys or HTTP: callers
(``ratelimit``, ``keypool``) build opaque key strings and interpret the answers. It does no I/O.

Invariants every implementation keeps (the contract suite in ``tests/state`` checks them):

- every operation is atomic and costs at most one round trip to the backing store (breaker reads may
  cost none: ``RedisState`` mirrors records it has read while Redis notifies it of every change);
- ``reserve`` is all-or-nothing: either every check is admitted and applied, or nothing changes;
- time is the store's clock (Redis ``TIME``; ``time.time()`` in memory), in epoch seconds;
- nothing grows forever: windows, leases and breaker records expire on their own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from relay.domain.breaker import DEFAULT_MAX_OPEN_S, DEFAULT_TUNING, BreakerTuning
from relay.errors import Unavailable

LimitKind = Literal["window", "window_peek", "concurrency"]

#: Exponential breaker backoff is 1, 2, 4 … seconds, capped here unless the host says otherwise (SPEC §6).
MAX_BACKOFF_S = DEFAULT_MAX_OPEN_S
#: A breaker record outlives its ``open_until`` by this much, so repeated failures keep climbing the
#: backoff ladder while a key that stays quiet forgets its history.
BREAKER_TTL_AFTER_OPEN_S = 600
#: Auth-failure records ("open until the key's version changes") are kept this long at most.
PERMANENT_BREAKER_TTL_S = 7 * 24 * 3600
#: Window counters and lease sets outlive their last use by this much (nothing reads old windows;
#: the margin only keeps a counter alive across a commit that lands right at the boundary).
EXPIRY_SLACK_S = 1

_WINDOW_KINDS = frozenset(("window", "window_peek"))
_KINDS = frozenset(("window", "window_peek", "concurrency"))


class StateUnavailable(Unavailable):
    """The shared state store could not answer (Redis down, timed out, or refused a command).

    Raised instead of the driver's own exceptions so callers depend on the error tree only; whether a
    request then fails closed or open is the caller's policy, not this package's.
    """

    code = "state_unavailable"


def backoff_s(failures: int, cap: float = MAX_BACKOFF_S) -> float:
    """Seconds a breaker stays open after its ``failures``-th consecutive trip: 1, 2, 4 … ``cap``
    (the host's ``breaker.max_open_s``, SPEC §6; 60 s by default)."""
    # 2**40 s is far past any cap a host may set; bounding the power avoids huge integers.
    return min(cap, 2 ** min(40, max(0, failures - 1)))


@dataclass(frozen=True, slots=True)
class LimitCheck:
    """One limit to test in a :meth:`SharedState.reserve`.

    ``window``: fixed epoch-aligned window of ``window_s`` seconds; admitted iff used + amount ≤ limit,
    then ``amount`` is added. ``window_peek``: admitted iff used < limit; nothing is added (token
    meters learn the real amount only at commit). ``concurrency``: admitted iff in-flight + 1 ≤ limit,
    then a lease is held until released or ``lease_s`` passes (``window_s``/``amount`` are unused).
    """

    key: str
    kind: LimitKind
    limit: int
    window_s: int = 0
    amount: int = 1

    def __post_init__(self) -> None:
        # Cheap guards: a zero window would divide by zero inside a Lua script, far from the cause.
        if self.kind not in _KINDS:
            raise ValueError(f"unknown limit kind {self.kind!r}")
        if self.kind in _WINDOW_KINDS and self.window_s < 1:
            raise ValueError(f"{self.kind} check {self.key!r} needs window_s >= 1")
        if self.limit < 0 or self.amount < 0:
            raise ValueError(f"check {self.key!r}: limit and amount must be >= 0")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer of a reserve: admitted, or which check failed and how long to wait (seconds)."""

    admitted: bool
    failed_key: str | None = None
    retry_after: float = 0.0


#: The one admitted verdict; shared so the hot path does not allocate on success.
ADMITTED = Verdict(True, None, 0.0)


@dataclass(frozen=True, slots=True)
class BreakerRecord:
    """A host key's breaker. ``open_until`` is epoch seconds on the store's clock; ``None`` means open
    until the key's ``version`` changes (auth failures). A time in the past means half-open: the pool
    may try the key again. ``failures`` counts consecutive backoff trips for the same version (the
    backoff step). ``trip_id`` names this opening (the store's clock in ms when it was written, rising
    per key): a caller passes the ``trip_id`` it saw when it chose the key (0: no record) as ``seen``,
    so a failure or success of a request sent before a later opening can be told apart and ignored."""

    open_until: float | None
    failures: int
    reason: str
    version: str
    trip_id: int = 0
    #: Set only on the record :meth:`SharedState.trip` returns: True when that very call opened (or
    #: reopened) the key, so exactly one caller across replicas logs the opening (SPEC §6). Not stored.
    opened: bool = field(default=False, compare=False)


@runtime_checkable
class SharedState(Protocol):
    """Shared hot state. Every method is one atomic step and at most one round trip."""

    async def reserve(self, checks: Sequence[LimitCheck], lease_id: str, lease_s: float) -> Verdict:
        """Evaluate all ``checks``; apply them all only if all pass (concurrency leases get ``lease_id``,
        expiring after ``lease_s``). Re-reserving a lease already held does not count it twice."""
        ...

    async def reserve_many(self, checks: Sequence[LimitCheck], n: int) -> tuple[int, Verdict]:
        """Admit up to ``n`` at once against ``window`` checks only (no lease, no peek): the most that
        fit every check now, applied to every check together; each is admitted as one
        :meth:`reserve` of the same checks made now would be. ``(granted, ADMITTED)``, or ``(0,
        verdict)`` naming the check that has no room and when its window resets."""
        ...

    async def commit(
        self, adds: Sequence[tuple[str, int, int]], release: Sequence[str], lease_id: str
    ) -> None:
        """Add each ``(key, window_s, amount)`` to the key's current window; drop ``lease_id`` from each
        concurrency key in ``release``."""
        ...

    async def renew(self, leases: Sequence[tuple[str, str]], lease_s: float) -> int:
        """Extend each ``(concurrency key, lease id)`` that is still held so it expires ``lease_s`` from
        now; one that expired or was released is not taken again (its slot may be another request's
        by now). How many were renewed. The holder's process calls it while its request runs
        (``relay.state.leases``), so a request running longer than ``lease_s`` keeps its slot and
        a dead process's leases still expire ``lease_s`` after its last renewal."""
        ...

    async def refund(self, adds: Sequence[tuple[str, int, int]]) -> None:
        """Take each ``(key, window_s, amount)`` back from the key's current window, never below zero (a
        window that holds less gives back what it has): an attempt admitted by a ``window`` check that
        turned out not to count. A refund made after its window ended takes from the next window."""
        ...

    async def window_usage(self, key: str, window_s: int, *, per_caller: bool) -> tuple[dict[str, int], int]:
        """What the current ``window_s`` window holds: ``({"": used}, window_end)`` for ``key`` itself
        (absent when nothing was added), or with ``per_caller`` every ``key:<suffix>`` counter as
        ``{suffix: used}``; ``window_end`` is when the window ends (epoch seconds, the store's clock).
        A read for the control plane (budget spend), not the hot path: it may cost a scan."""
        ...

    async def breakers(self, key_ids: Sequence[str]) -> dict[str, BreakerRecord]:
        """The breaker records of those ``key_ids`` that have one (closed keys are absent)."""
        ...

    async def trip(
        self,
        key_id: str,
        *,
        reason: str,
        version: str,
        retry_after: float | None = None,
        permanent: bool = False,
        seen: int | None = None,
        tuning: BreakerTuning = DEFAULT_TUNING,
    ) -> BreakerRecord | None:
        """Open a breaker: ``permanent`` → until the version changes; ``retry_after`` → for at least that
        long, failures unchanged; otherwise failures += 1 and backoff 1, 2, 4 … ``tuning.max_open_s``.
        A record of another version is treated as absent (an edited key starts with a clean history); a
        permanent record of the same version stays as it is (a late 5xx must not shorten an auth failure).

        A backoff failure of a *closed* key (no record) opens it only if it is the
        ``tuning.threshold``-th one within ``tuning.window_s`` (every replica's failures count: the
        recent failure times are kept beside the record, in the same atomic step); below the threshold
        nothing opens and ``None`` is returned. A failed half-open probe reopens at once. The returned
        record has ``opened`` set when this call wrote a new opening.

        ``seen`` (backoff trips only): the ``trip_id`` the failed request saw when it chose the key (0:
        closed). If the key's record has changed since (another request already tripped it), this
        failure counts for nothing and the record is returned unchanged (``None`` if there is none):
        the step advances once per trip, not once per failed request (SPEC §6). ``None``: unconditional.
        """
        ...

    async def reset(self, key_id: str, seen: int | None = None) -> bool:
        """Close the breaker (a success): delete its record — only if its ``trip_id`` is ``seen`` when
        given (a success of a request sent before a later opening does not close it). True when this
        call deleted a record (the one caller that logs the closing)."""
        ...

    async def claim_probe(self, key_id: str, trip_id: int, hold_s: float) -> bool:
        """Take the half-open probe of opening ``trip_id``: True for exactly one caller while the record
        is that opening, its time is up and no probe is held (a probe is held for ``hold_s`` at most,
        so a probe whose process died does not block the key for longer). False otherwise."""
        ...

    async def release_probe(self, key_id: str, trip_id: int) -> None:
        """Give back the probe of opening ``trip_id`` taken with :meth:`claim_probe`, when the probe
        ended without tripping or closing the key (a short 429, a cancelled attempt): the next request
        may probe at once. Nothing happens if the key has moved on to another opening."""
        ...

    async def next_counter(self, name: str) -> int:
        """Atomically increment and return a counter (1, 2, 3 …), for round-robin selection."""
        ...

    async def touch(self, name: str, member: str, at: float) -> None:
        """Record that ``member`` of set ``name`` was used at epoch seconds ``at``."""
        ...

    async def least_recent(self, name: str, members: Sequence[str]) -> list[str]:
        """``members`` ordered by last use, oldest first; never-used first; ties keep the given order."""
        ...

    async def pick_state(
        self, key_ids: Sequence[str], counter_name: str | None
    ) -> tuple[dict[str, BreakerRecord], int | None]:
        """``breakers(key_ids)`` and, if ``counter_name`` is given, ``next_counter`` — in one step."""
        ...

    async def ping(self) -> bool:
        """True if the store answers; never raises (for readiness probes and boot checks)."""
        ...

    async def start(self) -> None:
        """Begin background work, if any (``RedisState``: the breaker watch); idempotent, no I/O wait.
        Until it runs, every operation still works, each with its round trip."""
        ...

    async def close(self) -> None:
        """Release connections. The object is unusable afterwards."""
        ...
