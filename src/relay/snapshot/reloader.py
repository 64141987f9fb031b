"""The catalog reloader: it owns the current :class:`~relay.snapshot.Snapshot` and keeps it current.

What it does. Request handlers read ``reloader.snapshot`` once per request and use that object
throughout, so a concurrent reload can never show a request half of two catalogs. Rebuilding creates a
new object (``build_snapshot``) and swaps one reference (atomic in CPython). A write through this
replica's control plane reloads before it answers (read-your-writes: a key created here works here at
once). The reloader also wakes on a change notice (``store.notify``) and polls the catalog revision
every ``poll_interval`` seconds, so a write on any replica is visible everywhere within about a second
even if a notice is lost.

What it deliberately does not know. What the snapshot's objects mean (``relay.snapshot.entities``) or
how rows become them (``relay.snapshot.build``); the SQL (``relay.store.catalog``).

Invariants. The snapshot never goes back to an older revision. A failed reload (the database is
restarting) logs a warning and keeps serving the last snapshot. Each catalog problem is logged once,
when it first appears.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.background import Backoff, Loop
from relay.crypto.sealing import SecretBox
from relay.snapshot.build import Snapshot, build_snapshot
from relay.store import catalog as store
from relay.store.notify import ChangeFeed

log = logging.getLogger("relay.catalog")


class CatalogReloader:
    """Owns the current snapshot; rebuilds it on notice or when the stored revision moves."""

    def __init__(
        self,
        engine: AsyncEngine,
        feed: ChangeFeed,
        box: SecretBox,
        env: Mapping[str, str],
        *,
        poll_interval: float = 1.0,
        admin_token_hash: str | None = None,
    ) -> None:
        self._engine = engine
        self._admin_token_hash = admin_token_hash
        self._feed = feed
        self._box = box
        self._env = env
        self._poll_interval = poll_interval
        # A failed reload is retried at the next notice or poll: the wait is the step's own.
        self._loop = Loop("relay-catalog-reloader", self._follow, backoff=Backoff(0, 0), report=self._failed)
        self.snapshot = Snapshot(revision=-1, loaded_at=0.0)

    async def reload(self) -> Snapshot:
        async with self._engine.connect() as conn:
            revision = await store.read_revision(conn)
            rows = await store.load_catalog(conn)
        current = self.snapshot
        if revision < current.revision:
            return current  # a concurrent reload already swapped in something newer: never go back
        fresh = build_snapshot(
            revision, rows, self._box, self._env, current, admin_token_hash=self._admin_token_hash
        )
        self.snapshot = fresh
        for problem in fresh.problems:
            if problem not in current.problems:
                log.warning(problem)
        log.debug("catalog snapshot at revision %d", revision)
        return fresh

    async def start(self) -> None:
        await self.reload()
        await self._feed.start()
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await self._feed.stop()

    async def _follow(self) -> None:
        """Wait for a notice or the poll interval, then reload if anything may have changed."""
        if await self._feed.wait(self._poll_interval):
            await self.reload()
            return
        async with self._engine.connect() as conn:
            revision = await store.read_revision(conn)
        if revision != self.snapshot.revision:
            await self.reload()

    def _failed(self, _name: str, exc: BaseException, _delay: float) -> None:
        # The database may be restarting: keep serving the last snapshot.
        log.warning("catalog reload failed (%s); keeping revision %d", exc, self.snapshot.revision)
