"""``LeaseRenewer``: keeps this process's in-flight concurrency leases alive while their requests run.

Why: a concurrency lease (SPEC §5) expires ``lease_s`` after it was taken — the request's own deadline
plus a margin — so a request whose process died frees its slot on its own. But a stream's deadline
is a read timeout, not a total: a stream that keeps sending runs as long as it likes, and once it
outlived ``lease_s`` its slot was free again while it still ran, so the limit admitted one more.

What it does: the rate limiter ``hold``s each lease it took and ``drop``s it at commit. While anything
is held, one task renews every held lease every ``every_s`` (``lease_s / 3`` by default) with one
:meth:`SharedState.renew` per :data:`RENEW_BATCH` leases, whatever the number of requests: nothing
per request or per chunk beyond a dict entry. A lease renewed at ``t`` expires at ``t + lease_s``, so
two renewals in a row may fail (Redis away) before a running request loses its slot. A dead
process renews nothing: its leases expire at most ``lease_s`` after its last renewal, as before.

What it deliberately does not know: policies, rules, HTTP. The task starts with the first hold and
ends by itself once nothing is held (no task while idle, nothing to start at boot); :meth:`close`
stops it at shutdown.
"""

from __future__ import annotations

import logging
from typing import Final

from relay.background import DONE, Loop
from relay.state.base import SharedState, StateUnavailable

log = logging.getLogger("relay.state")

#: At most this many (key, lease) pairs per renew call (one script call each on Redis).
RENEW_BATCH: Final = 1000


class LeaseRenewer:
    """Renews the leases held by this process's running requests (one per process, in the limiter)."""

    __slots__ = ("_every_s", "_failing", "_held", "_lease_s", "_renewals", "_state")

    def __init__(self, state: SharedState, lease_s: float, *, every_s: float | None = None) -> None:
        self._state = state
        self._lease_s = lease_s
        self._every_s = every_s if every_s is not None else lease_s / 3
        self._held: dict[str, tuple[str, ...]] = {}  # lease id -> its concurrency keys
        self._failing = False
        self._renewals = Loop(
            "relay-lease-renewer", self._renew_held, every_s=self._every_s, wait_first=True, report=_report
        )

    @property
    def held(self) -> int:
        return len(self._held)

    def hold(self, lease_id: str, keys: tuple[str, ...]) -> None:
        """Renew ``lease_id`` on ``keys`` until :meth:`drop` (call it from the event loop)."""
        self._held[lease_id] = keys
        self._renewals.launch()

    def drop(self, lease_id: str) -> None:
        self._held.pop(lease_id, None)

    async def renew_now(self) -> int:
        """Renew every held lease once; how many (key, lease) pairs were still held and renewed."""
        pairs = [(key, lease_id) for lease_id, keys in list(self._held.items()) for key in keys]
        renewed = 0
        for start in range(0, len(pairs), RENEW_BATCH):
            try:
                renewed += await self._state.renew(pairs[start : start + RENEW_BATCH], self._lease_s)
            except StateUnavailable as exc:
                if not self._failing:
                    log.warning("concurrency leases not renewed (%s); retrying in %g s", exc, self._every_s)
                self._failing = True
                return renewed
        self._failing = False
        return renewed

    async def _renew_held(self) -> object:
        """Renew what is held; the task ends once nothing is (the next ``hold`` starts it again).
        A failure (a bug) is logged and retried after ``every_s``: it must not end renewals for every
        later request."""
        if self._held:
            await self.renew_now()
        return None if self._held else DONE

    async def close(self) -> None:
        """Stop renewing (shutdown); held leases then expire ``lease_s`` after their last renewal."""
        await self._renewals.stop()


def _report(_name: str, exc: BaseException, _delay: float) -> None:
    log.warning("renewing concurrency leases failed: %s: %s", type(exc).__name__, exc)
