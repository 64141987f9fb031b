"""The batch loops' answer to a transient database error: :class:`RetryBackoff`.

What the HTTP apps answer to a database that is away is ``relay.http.errors.escaped`` (a 503 with
``Retry-After``), told by ``relay.store.engine.database_unavailable``.
"""

from __future__ import annotations

import asyncio
import logging

from relay.store.engine import is_transient

log = logging.getLogger("relay.store")


class RetryBackoff:
    """The batch loops' answer to a transient database error (a restart, a busy SQLite file): log,
    wait, and try the same group again, 0.2 s doubling to 5 s while the outage lasts. The work a loop
    holds lives only in memory, so giving up would lose it; any other error is the caller's."""

    __slots__ = ("_delay",)

    FIRST_S = 0.2
    MAX_S = 5.0

    def __init__(self) -> None:
        self._delay = self.FIRST_S

    async def wait_if_transient(self, exc: BaseException, what: str) -> bool:
        """True after waiting when ``exc`` is transient (retry); False when it is not (don't)."""
        if not is_transient(exc):
            return False
        log.warning("%s failed (%s); retrying in %.1f s", what, type(exc).__name__, self._delay)
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, self.MAX_S)
        return True

    def reset(self) -> None:
        """The database answered again."""
        self._delay = self.FIRST_S
