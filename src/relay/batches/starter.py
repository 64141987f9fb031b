"""Starts reserved batch items in groups (SPEC §10.2, §10.5): ``available`` (reserved) → ``running``.

The statement is the batch store's (``BatchStore.start``, ``relay.store.batch_queue``); :class:`Starter`
groups the calls of a replica's worker slots.

Why. A claim only reserves items (they stay ``available``, so a cancel on any replica cancels them);
an item may run only once the database has moved it to ``running`` with a statement that fails if it
was cancelled meanwhile (``BatchStore.start``). One transaction per item start would cost a commit per item
— the very cost claim-ahead removed — so every worker slot that frees up asks here, and a single task
starts whatever has accumulated with ONE statement: at low load a group is one item, started at once;
under load groups grow by themselves while the previous statement is in flight. On Postgres the
statements run on one connection the starter keeps (``relay.store.held``): a pool checkout would
first ping it (three round trips), which cost more than the statement itself. On SQLite they are
urgent turns of the replica's write group (``relay.store.write_group``): they go before the claims and
finalizes, so a slot waits for no one else's transaction but the one in progress.

Database outages. A start that fails on a transient error is retried with backoff (the items stay
reserved, so no one else takes them meanwhile). Whether a failed attempt committed is unknown: a retry
then finds those items no longer ``available`` and reports them not started; the worker pool drops
them and its orphan check puts them back. Any other error is a bug: the group is reported not started
(logged), and the orphan check releases their reservations.

Invariants. :meth:`Starter.start` answers True only for an item this replica's row now shows ``running``
(committed); a caller that is cancelled while waiting learns nothing, so it must treat the item as
possibly started (the finalizer only finalizes items that are really running).
"""

from __future__ import annotations

import asyncio
import logging

from relay.background import Loop
from relay.batches.outage import outage_backoff, report_outage, retry_if_transient
from relay.store.batch_queue import BatchStore
from relay.store.held import Turns

log = logging.getLogger("relay.batches")

Key = tuple[str, int]
MAX_GROUP = 500  # items per statement: bounds its size


class Starter:
    def __init__(self, store: BatchStore, instance_id: str, turns: Turns | None = None) -> None:
        self._store = store
        self._held = store.held()  # its own connection, unless it takes turns in a shared one:
        self._turns: Turns = turns if turns is not None else self._held
        self._instance_id = instance_id
        self._waiting: dict[Key, asyncio.Future[bool]] = {}
        self._arrived = asyncio.Event()
        self._loop = Loop("batch-starter", self._start_group, backoff=outage_backoff(), report=report_outage)

    def open(self) -> None:
        self._loop.launch()

    async def start(self, key: Key) -> bool:
        """True once the item is ``running`` here; False when it must not run (cancelled, or no
        longer reserved by this replica)."""
        future = self._waiting.get(key)
        if future is None or future.cancelled():
            future = self._waiting[key] = asyncio.get_running_loop().create_future()
            self._arrived.set()
        # Awaited as it is, not shielded: a caller cancelled meanwhile cancels the future, the item
        # stays in the group, and the group's answer skips a future already done. (A shield cost a
        # second future and one more turn of the event loop per item.)
        return await future

    async def close(self) -> None:
        await self._loop.stop()
        await self._held.close()
        for future in self._waiting.values():
            if not future.done():
                future.set_result(False)
        self._waiting.clear()

    async def _start_group(self) -> None:
        """Wait for items, then start one group of them; a transient error leaves the group waiting
        (the loop retries it after its backoff)."""
        if not self._waiting:
            await self._arrived.wait()
            self._arrived.clear()
            return
        group = list(self._waiting)[:MAX_GROUP]
        try:
            async with self._turns.use() as db:
                started = await self._store.start(self._instance_id, group, db=db)
        except Exception as exc:
            retry_if_transient(exc, f"starting {len(group)} batch items")
            log.exception("starting %d batch items failed; they are not run", len(group))
            started = set()
        for key in group:
            future = self._waiting.pop(key)
            if not future.done():
                future.set_result(key in started)
