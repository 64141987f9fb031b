"""How far a worker pool claims ahead of its running items (SPEC §10.6 leaves it to us).

Why. A claim waits for a turn of the busy event loop and for the database, so under load it takes
milliseconds. With fast items (a 0 ms upstream) every slot finishes several items in that time: if the
ready queue only held one claim's worth, slots sat idle during every claim and the claim rate, not the
upstream, capped throughput. And a claim costs a round trip and the database's pick whatever its size,
so claiming a few items at a time costs the database (which shares the machine) far more per item.

The rule. Keep enough items ready to cover what the pool finishes during ``3 ×`` a claim's duration,
or during ``2 × CLAIM_EVERY_S`` if that is more, and at least one item per slot, at most
``MAX_AHEAD_PER_SLOT`` per slot: ``target = clamp(max(3 × rate × claim time, 2 × rate ×
CLAIM_EVERY_S), size, MAX_AHEAD_PER_SLOT × size)``. Both figures are exponentially weighted averages
measured as the pool runs. A claim is made once half the target is missing, so claims come in groups
that are worth their statement: under load about every ``CLAIM_EVERY_S`` at most. (With the latency
rule alone, a claim of one statement made claims of ≈ 16 items at 0 ms upstream latency instead of ≈
65, and the database's CPU grew with their number.) If claims cannot keep up, ``rate × claim time``
grows relative to the claim size and the target grows with it until they do. With slow items (a 200 ms
upstream) the target stays at ``size``: ready items then wait at most one item's run, and few items sit
reserved but not started (they read ``available`` and a cancel on any replica cancels them; a ``kill
-9`` of the replica leaves them reserved until another replica's rescue pass releases them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

MAX_AHEAD_PER_SLOT = 8
CLAIM_EVERY_S = 0.025  # under load, a claim about this often (the finalizer's group interval too)
_WEIGHT = 0.3  # of the newest measurement in the moving averages


class ClaimPacer:
    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._size = size
        self._clock = clock
        self._rate = 0.0  # items finished per second
        self._claim_s = 0.0  # one claim's duration
        self._finished = 0
        self._since = clock()

    def finished(self) -> None:
        self._finished += 1

    def claimed(self, seconds: float, *, got: int) -> None:
        """A claim took ``seconds``. Updates the averages; an empty claim (nothing available) says
        nothing about how fast items are claimed, and the idle time since the last claim nothing about
        how fast they run."""
        now = self._clock()
        if got:
            self._claim_s = _average(self._claim_s, seconds)
            elapsed = now - self._since
            if elapsed > 0 and self._finished:
                self._rate = _average(self._rate, self._finished / elapsed)
        self._finished = 0
        self._since = now

    def ready_target(self) -> int:
        wanted = math.ceil(self._rate * max(3 * self._claim_s, 2 * CLAIM_EVERY_S))
        return min(MAX_AHEAD_PER_SLOT * self._size, max(self._size, wanted))

    def want(self, running: int, ready: int) -> int:
        """How many items to claim now (0: not yet), given the items running and ready."""
        target = self.ready_target()
        want = (self._size - running) + target - ready
        if running + ready == 0 or want >= max(1, target // 2):
            return max(want, 0)
        return 0


def _average(previous: float, latest: float) -> float:
    return latest if previous == 0 else (1 - _WEIGHT) * previous + _WEIGHT * latest
