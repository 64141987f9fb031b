"""Change notices: how a catalog write on one replica reaches every replica's snapshot quickly.

Postgres: every write transaction sends ``pg_notify('relay_catalog')`` (``store.catalog.bump_revision``),
which Postgres delivers exactly when it commits; every replica keeps one dedicated asyncpg
connection (outside the pool) that LISTENs and wakes its reloader. The connection is re-opened with
backoff when it drops; the reloader's revision poll covers any notice lost meanwhile, so a notice is an
accelerator, never the only path. SQLite (one process): the notice is an in-process event.

It does not know what a snapshot is; it only wakes whoever waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from relay.background import Backoff, Loop
from relay.store.catalog import CATALOG_CHANNEL as CHANNEL
from relay.store.engine import asyncpg_dsn

log = logging.getLogger("relay.notify")

LISTEN_BACKOFF_FIRST_S, LISTEN_BACKOFF_MAX_S = 0.5, 10.0  # re-opening a dropped LISTEN connection


class ChangeFeed:
    """In-process feed: ``wake`` releases ``wait`` (SQLite: the only writer is this process, whose
    control plane reloads directly; the feed then only paces the revision poll)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def wake(self) -> None:
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """True when woken by a notice, False when ``seconds`` passed first."""
        try:
            await asyncio.wait_for(self._event.wait(), seconds)
        except TimeoutError:
            return False
        self._event.clear()
        return True

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class PostgresChangeFeed(ChangeFeed):
    """LISTEN/NOTIFY across replicas, plus the in-process wake for this replica's own writes."""

    def __init__(self, database_url: str) -> None:
        super().__init__()
        # The write path notifies inside its transaction; this replica's own writes reload directly.
        self._dsn = asyncpg_dsn(database_url)
        self._listener: asyncpg.Connection | None = None
        self._listening = Loop(
            "relay-catalog-listen",
            self._listen_until_lost,
            backoff=Backoff(LISTEN_BACKOFF_FIRST_S, LISTEN_BACKOFF_MAX_S),
            report=_report_lost,
        )

    async def start(self) -> None:
        await self._listening.start()

    async def stop(self) -> None:
        await self._listening.stop()
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.close()

    async def _listen_until_lost(self) -> None:
        """Open the LISTEN connection and hold it until it drops; the loop re-opens it after its
        backoff (reset once a connection is listening)."""
        lost = asyncio.Event()
        self._listener = await asyncpg.connect(self._dsn)
        self._listener.add_termination_listener(lambda _conn, lost=lost: lost.set())
        await self._listener.add_listener(CHANNEL, self._on_notice)
        self._listening.backoff.reset()
        self.wake()  # anything may have changed while we were not listening
        await lost.wait()
        self._listener = None
        raise ConnectionResetError("the LISTEN connection closed")

    def _on_notice(self, *_args: Any) -> None:
        self.wake()


def _report_lost(_name: str, exc: BaseException, delay: float) -> None:
    log.warning("catalog LISTEN connection lost (%s); retrying in %.1fs", exc, delay)
