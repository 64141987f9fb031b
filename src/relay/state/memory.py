"""``MemoryState``: the in-process twin of ``RedisState``, for one replica (``RELAY_REDIS_URL`` unset).

It keeps exactly the semantics of the Redis implementation (the contract suite runs against both) but
its numbers are per process: N replicas on memory state admit up to N × limit. No method awaits
anything, so each one runs to completion without yielding to the event loop — that is what makes it
atomic under asyncio without locks. Do not add an ``await`` inside these methods.

Memory stays bounded by what is live, even with per-credential limits over short-lived credentials:
a window counter keeps only its current window (a new window overwrites the old one in place), expired
leases are dropped on every reserve of their key, expired breaker records are dropped when read, and a
sweep at most once a minute (run inside ``reserve``, O(entries)) drops whatever nobody touched again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import replace

from relay.domain.breaker import DEFAULT_TUNING, BreakerTuning
from relay.state.base import (
    ADMITTED,
    BREAKER_TTL_AFTER_OPEN_S,
    EXPIRY_SLACK_S,
    PERMANENT_BREAKER_TTL_S,
    BreakerRecord,
    LimitCheck,
    Verdict,
    backoff_s,
)

SWEEP_EVERY_S = 60.0


class MemoryState:
    """Shared state kept in this process's memory. Implements :class:`relay.state.base.SharedState`."""

    def __init__(self) -> None:
        # (key, window_s) -> [window index, used]; one entry per counter, reused across windows.
        self._windows: dict[tuple[str, int], list[int]] = {}
        # concurrency key -> {lease_id: expires_at}
        self._leases: dict[str, dict[str, float]] = {}
        # key_id -> (record, forget_at)
        self._breakers: dict[str, tuple[BreakerRecord, float]] = {}
        # key_id -> (times of its latest failures while closed, oldest first; forget at): for a host
        # whose breaker threshold is above 1 (SPEC §6), at most ``threshold`` entries
        self._failures: dict[str, tuple[list[float], float]] = {}
        # key_id -> (trip_id, held until): the half-open probe taken for that opening
        self._probes: dict[str, tuple[int, float]] = {}
        self._counters: dict[str, int] = {}
        self._last_use: dict[str, dict[str, float]] = {}
        self._next_sweep = time.time() + SWEEP_EVERY_S

    # -- rate limits ---------------------------------------------------------------------------------

    def _used(self, key: str, window_s: int, index: int) -> int:
        entry = self._windows.get((key, window_s))
        return entry[1] if entry is not None and entry[0] == index else 0

    def _add(self, key: str, window_s: int, index: int, amount: int) -> None:
        entry = self._windows.get((key, window_s))
        if entry is None:
            self._windows[(key, window_s)] = [index, amount]
        elif entry[0] == index:
            entry[1] += amount
        else:
            entry[0] = index
            entry[1] = amount

    def _live_leases(self, key: str, now: float) -> dict[str, float]:
        leases = self._leases.get(key)
        if leases is None:
            leases = self._leases[key] = {}
        elif leases:
            expired = [lease for lease, until in leases.items() if until <= now]
            for lease in expired:
                del leases[lease]
        return leases

    def _sweep(self, now: float) -> None:
        """Forget ended windows, lease sets with no live lease, and breaker records past their TTL."""
        self._next_sweep = now + SWEEP_EVERY_S
        second = math.floor(now) - EXPIRY_SLACK_S
        ended = [wkey for wkey, (index, _used) in self._windows.items() if index < second // wkey[1]]
        for wkey in ended:
            del self._windows[wkey]
        idle = [key for key, leases in self._leases.items() if all(until <= now for until in leases.values())]
        for key in idle:
            del self._leases[key]
        forgotten = [key_id for key_id, (_record, forget_at) in self._breakers.items() if forget_at <= now]
        for key_id in forgotten:
            del self._breakers[key_id]
        for key_id in [k for k, (_t, until) in self._probes.items() if until <= now]:
            del self._probes[key_id]
        for key_id in [k for k, (_times, forget_at) in self._failures.items() if forget_at <= now]:
            del self._failures[key_id]

    async def reserve(self, checks: Sequence[LimitCheck], lease_id: str, lease_s: float) -> Verdict:
        now = time.time()
        if now >= self._next_sweep:
            self._sweep(now)
        second = math.floor(now)
        # Phase 1: evaluate every check; nothing is written unless all pass.
        for check in checks:
            if check.kind == "concurrency":
                leases = self._live_leases(check.key, now)
                if lease_id not in leases and len(leases) + 1 > check.limit:
                    return Verdict(False, check.key, 1.0)
                continue
            index = second // check.window_s
            used = self._used(check.key, check.window_s, index)
            ok = used + check.amount <= check.limit if check.kind == "window" else used < check.limit
            if not ok:
                retry_after = (index + 1) * check.window_s - now
                return Verdict(False, check.key, max(1.0, retry_after))
        # Phase 2: apply.
        expires_at = now + lease_s
        for check in checks:
            if check.kind == "concurrency":
                self._leases[check.key][lease_id] = expires_at
            elif check.kind == "window" and check.amount:
                self._add(check.key, check.window_s, second // check.window_s, check.amount)
        return ADMITTED

    async def reserve_many(self, checks: Sequence[LimitCheck], n: int) -> tuple[int, Verdict]:
        now = time.time()
        second = math.floor(now)
        granted, refusal = n, ADMITTED
        for check in checks:
            if check.kind != "window":
                raise ValueError(f"reserve_many takes window checks only, not {check.kind!r}")
            index = second // check.window_s
            room = (check.limit - self._used(check.key, check.window_s, index)) // max(1, check.amount)
            if room < granted:
                granted = max(0, room)
                refusal = Verdict(False, check.key, max(1.0, (index + 1) * check.window_s - now))
        if granted <= 0:
            return 0, refusal
        for check in checks:
            if check.amount:
                self._add(check.key, check.window_s, second // check.window_s, granted * check.amount)
        return granted, ADMITTED

    async def commit(
        self, adds: Sequence[tuple[str, int, int]], release: Sequence[str], lease_id: str
    ) -> None:
        second = math.floor(time.time())
        for key, window_s, amount in adds:
            if amount > 0:
                self._add(key, window_s, second // window_s, amount)
        for key in release:
            leases = self._leases.get(key)
            if leases is not None:
                leases.pop(lease_id, None)
                if not leases:
                    del self._leases[key]

    async def renew(self, leases: Sequence[tuple[str, str]], lease_s: float) -> int:
        now = time.time()
        renewed = 0
        for key, lease_id in leases:
            held = self._leases.get(key)
            until = held.get(lease_id) if held is not None else None
            if held is not None and until is not None and until > now:
                held[lease_id] = now + lease_s
                renewed += 1
        return renewed

    async def refund(self, adds: Sequence[tuple[str, int, int]]) -> None:
        second = math.floor(time.time())
        for key, window_s, amount in adds:
            entry = self._windows.get((key, window_s))
            if entry is not None and entry[0] == second // window_s:
                entry[1] = max(0, entry[1] - amount)

    async def window_usage(self, key: str, window_s: int, *, per_caller: bool) -> tuple[dict[str, int], int]:
        index = math.floor(time.time()) // window_s
        prefix = key + ":"
        found: dict[str, int] = {}
        for (name, size), (at, used) in self._windows.items():
            if size != window_s or at != index:
                continue
            if per_caller and name.startswith(prefix):
                found[name[len(prefix) :]] = used
            elif not per_caller and name == key:
                found[""] = used
        return found, (index + 1) * window_s

    # -- breakers ------------------------------------------------------------------------------------

    def _record(self, key_id: str, now: float) -> BreakerRecord | None:
        entry = self._breakers.get(key_id)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._breakers[key_id]
            return None
        return entry[0]

    async def breakers(self, key_ids: Sequence[str]) -> dict[str, BreakerRecord]:
        if not self._breakers:
            return {}
        now = time.time()
        found: dict[str, BreakerRecord] = {}
        for key_id in key_ids:
            record = self._record(key_id, now)
            if record is not None:
                found[key_id] = record
        return found

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
        now = time.time()
        previous = self._record(key_id, now)
        if previous is not None and previous.version != version:
            previous = None  # an edited key starts with a clean history
        failures = 0
        current = 0
        if previous is not None:
            if previous.open_until is None:
                return previous  # auth failure is sticky: only a new version (or reset) reopens the key
            failures, current = previous.failures, previous.trip_id
        backoff = not permanent and retry_after is None
        if backoff and seen is not None and seen != current:
            return previous  # sent before the key's current state: counts for nothing (SPEC §6)
        counted = backoff and previous is None and tuning.threshold > 1
        if counted and not self._nth_failure(key_id, now, tuning):
            return None  # a closed key opens on the threshold-th failure within the window
        self._failures.pop(key_id, None)
        trip_id = max(current + 1, int(now * 1000))
        open_until: float | None
        if permanent:
            open_until, forget_at = None, now + PERMANENT_BREAKER_TTL_S
        else:
            if backoff:
                failures += 1
                open_until = now + backoff_s(failures, tuning.max_open_s)
            else:
                open_until = now + (retry_after or 0.0)
                if previous is not None and previous.open_until is not None:
                    open_until = max(open_until, previous.open_until)  # a 429 never shortens an opening
            forget_at = open_until + BREAKER_TTL_AFTER_OPEN_S
        record = BreakerRecord(open_until, failures, reason, version, trip_id)
        self._breakers[key_id] = (record, forget_at)
        self._probes.pop(key_id, None)
        return replace(record, opened=True)

    def _nth_failure(self, key_id: str, now: float, tuning: BreakerTuning) -> bool:
        """Note a failure of a closed key; True if it is the ``threshold``-th within ``window_s``."""
        entry = self._failures.get(key_id)
        times = entry[0] if entry is not None and entry[1] > now else []
        times.append(now)
        del times[: -tuning.threshold]
        self._failures[key_id] = (times, now + tuning.window_s)
        return len(times) >= tuning.threshold and now - times[0] <= tuning.window_s

    async def reset(self, key_id: str, seen: int | None = None) -> bool:
        if seen is not None:
            entry = self._breakers.get(key_id)
            if entry is None or entry[0].trip_id != seen:
                return False  # a success of a request sent before the current opening closes nothing
        closed = self._breakers.pop(key_id, None) is not None
        self._probes.pop(key_id, None)
        return closed

    async def claim_probe(self, key_id: str, trip_id: int, hold_s: float) -> bool:
        now = time.time()
        record = self._record(key_id, now)
        if record is None or record.trip_id != trip_id:
            return False
        if record.open_until is None or record.open_until > now:
            return False
        held = self._probes.get(key_id)
        if held is not None and held[0] == trip_id and held[1] > now:
            return False
        self._probes[key_id] = (trip_id, now + hold_s)
        return True

    async def release_probe(self, key_id: str, trip_id: int) -> None:
        held = self._probes.get(key_id)
        if held is not None and held[0] == trip_id:
            del self._probes[key_id]

    # -- key selection -------------------------------------------------------------------------------

    async def next_counter(self, name: str) -> int:
        value = self._counters.get(name, 0) + 1
        self._counters[name] = value
        return value

    async def touch(self, name: str, member: str, at: float) -> None:
        uses = self._last_use.get(name)
        if uses is None:
            uses = self._last_use[name] = {}
        uses[member] = at

    async def least_recent(self, name: str, members: Sequence[str]) -> list[str]:
        uses = self._last_use.get(name)
        if not uses:
            return list(members)
        # sorted() is stable, so ties (and all never-used members) keep the given order.
        return sorted(members, key=lambda member: uses.get(member, -math.inf))

    async def pick_state(
        self, key_ids: Sequence[str], counter_name: str | None
    ) -> tuple[dict[str, BreakerRecord], int | None]:
        found = await self.breakers(key_ids)  # no suspension: breakers() itself never awaits
        counter = await self.next_counter(counter_name) if counter_name is not None else None
        return found, counter

    # -- lifecycle -----------------------------------------------------------------------------------

    async def ping(self) -> bool:
        return True

    async def start(self) -> None:
        """Nothing runs in the background: every read is already a dict lookup."""

    async def close(self) -> None:
        """Nothing to release; the state dies with the object."""
