"""``BreakerMirror``: this replica's copy of the breaker records it has read from Redis, kept only while
Redis's change notifications say nothing changed.

Why: every live request reads its host keys' breakers before the upstream call (SPEC §6). Almost
always nothing is open, yet with Redis that read was a round trip per request — about a fifth of
Relay's CPU per request and a tenth of a millisecond on the request path. Records change only when a
replica trips or resets a breaker, and those writes publish the key id on a Redis channel
(``relay.state.scripts``). A replica that listens to that channel can keep what it read until it is
told otherwise.

Rules (the correctness argument; ``tests/state/test_mirror.py`` drives each one):

- The mirror answers only while ``live``: between the confirmation of the subscription and the first
  sign that it broke. Before and after, every read goes to Redis, as without a mirror.
- A notification drops that key's entry; a (re)subscription or a broken connection drops everything
  (notifications may have been missed in between).
- A read that was in flight while anything was dropped is not stored: the ``generation`` taken before
  the read no longer matches, so a stale answer that crossed a notification cannot be kept.
- Entries also age out after ``max_age_s`` (defensive: Redis expires old records without a
  notification; such a record is long past its ``open_until``, so it would not change a decision).
- Time does not invalidate: a record whose ``open_until`` passes turns half-open by itself, because
  callers compare ``open_until`` with the clock at each use.

What it costs: a trip on one replica reaches the others as fast as Redis delivers a pub/sub message
(well under a millisecond on a LAN); a request that another replica's trip has not reached yet may
still try that key once and fail over, exactly as if the two requests had raced without a mirror. A
subscription whose connection closes is noticed at once; one that dies silently (a network partition)
is noticed when its ping goes unanswered, within 3 s (``RedisState``). Until then this replica may miss
other replicas' changes and behaves as if breakers were per replica: a request may try a key another
replica opened, fail over, and open it here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from relay.state.base import BreakerRecord

#: How long an entry is answered from memory at most, even without a notification.
MAX_AGE_S = 5.0


class BreakerMirror:
    """Entries by host-key id: the record, or ``None`` for "no record" (closed) — that is the common
    answer worth keeping. Bounded by the number of host keys the replica routes to."""

    __slots__ = ("_clock", "_entries", "generation", "live", "max_age_s")

    def __init__(self, *, max_age_s: float = MAX_AGE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        self._entries: dict[str, tuple[BreakerRecord | None, float]] = {}
        self.generation = 0
        self.live = False

    def get(self, key_ids: Sequence[str]) -> dict[str, BreakerRecord] | None:
        """The records of ``key_ids`` (closed keys absent) if every one is known and fresh, else None."""
        if not self.live:
            return None
        entries = self._entries
        oldest = self._clock() - self.max_age_s
        found: dict[str, BreakerRecord] = {}
        for key_id in key_ids:
            entry = entries.get(key_id)
            if entry is None or entry[1] < oldest:
                return None
            if entry[0] is not None:
                found[key_id] = entry[0]
        return found

    def store(self, key_ids: Sequence[str], found: dict[str, BreakerRecord], generation: int) -> None:
        """Keep what a read returned, unless something was dropped since it began (``generation``)."""
        if not self.live or generation != self.generation:
            return
        now = self._clock()
        for key_id in key_ids:
            self._entries[key_id] = (found.get(key_id), now)

    def changed(self, key_id: str) -> None:
        """A replica (this one included) wrote this key's record."""
        self.generation += 1
        self._entries.pop(key_id, None)

    def reset_all(self, *, live: bool) -> None:
        """Forget everything: the subscription was (re)confirmed (``live``) or broke (not ``live``)."""
        self.generation += 1
        self._entries.clear()
        self.live = live
