"""Writes finished batch items' final states and usage events in groups (SPEC §10.6, §10.8).

Why a separate writer. An item's run ends in memory (an :class:`ItemResult`); making it final is a
database transaction. One transaction per item made the database the bottleneck (the write lock, BEGIN
and COMMIT per item, and a worker slot held until its commit). Here every finished item is queued and a
single task writes whatever has accumulated with ``queue.finalize_many`` — one transaction for the
group, each item's event still committed together with its state. At low load a group is one item,
written at once; under load groups grow by themselves while the previous commit is in flight.

Database outages. A group that fails on a transient error (``store.engine.is_transient``: a Postgres
restart, SQLite busy) stays queued and is retried with backoff until the database answers: the work is
done and only lives here, so giving up would lose it. Any other error is a bug: the group is dropped
and logged; its items stay ``running`` in the database until the rescue bound settles them.

Invariants. An item is in :attr:`pending` from :meth:`add` until its transaction commits (or the
database says it is no longer this replica's). ``on_settled`` is called once per item, after that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches import queue
from relay.batches.runner import ItemResult
from relay.store.engine import is_transient

log = logging.getLogger("relay.batches")

Key = tuple[str, int]
MAX_GROUP = 500  # items per transaction: bounds the statement sizes and the time locks are held


class Finalizer:
    def __init__(
        self,
        engine: AsyncEngine,
        instance_id: str,
        on_settled: Callable[[Key, ItemResult, bool], None],
    ) -> None:
        self._engine = engine
        self._instance_id = instance_id
        self._on_settled = on_settled  # (key, result, finalized here?) once per item
        self.pending: dict[Key, ItemResult] = {}
        self._arrived = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="batch-finalizer")

    def add(self, key: Key, result: ItemResult) -> None:
        self.pending[key] = result
        self._arrived.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything queued is written (True) or ``timeout_s`` passes (False)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self.pending:
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self) -> None:
        delay = 0.2
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            while self.pending:
                group = list(self.pending.items())[:MAX_GROUP]
                try:
                    done = await queue.finalize_many(
                        self._engine,
                        self._instance_id,
                        [
                            queue.FinalItem(key[0], key[1], r.state, r.status, r.error, r.event)
                            for key, r in group
                        ],
                    )
                except Exception as exc:
                    if is_transient(exc):
                        log.warning(
                            "finalizing %d batch items failed (%s); retrying in %.1f s",
                            len(group),
                            type(exc).__name__,
                            delay,
                        )
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 5.0)
                        continue
                    log.exception("finalizing %d batch items failed; they are left to the rescue", len(group))
                    done = None
                delay = 0.2
                for key, result in group:
                    del self.pending[key]
                    if done is not None:
                        self._on_settled(key, result, key in done)
