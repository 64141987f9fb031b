"""Writes finished batch items' final states and usage events in groups (SPEC §10.6, §10.8).

Why a separate writer. An item's run ends in memory (an :class:`ItemResult`); making it final is a
database transaction. One transaction per item made the database the bottleneck (the write lock, BEGIN
and COMMIT per item, and a worker slot held until its commit). Here every finished item is queued and a
single task writes whatever has accumulated with ``BatchStore.finalize_many`` — one transaction for the
group, each item's event still committed together with its state. At low load a group is one item,
written at once; under load groups grow by themselves while the previous commit is in flight, and a
group starts at most every ``GROUP_INTERVAL_S``: a group's statements cost the process about as much
as its items' rows (each is a round trip that wakes the loop), so bigger groups under load are CPU
saved per item, paid for with at most that much more time between an item's end and its commit. The
worker slot is free from the item's end, so no throughput is lost. On
Postgres the groups' transactions run on one connection the finalizer keeps (``relay.store.held``); on
SQLite they are turns of the replica's write group (``relay.store.write_group``), sharing a
transaction with the claims and starts they meet.

Response bodies. A completed item's body was appended to a payload file when it ran; before a group's
transaction, ``flush_responses`` puts those bytes on disk (one ``fdatasync`` per file for the whole
group), so a committed row never points at bytes a crash could lose. If the flush fails, the group's
completed items are written as discarded (``internal error: the response could not be stored``).
Under the ``database`` payload store there is nothing to flush: the bodies are inserted by the group's
own transaction (``save_responses``), so state and body commit together.

Database outages. A group that fails on a transient error (``store.engine.is_transient``: a Postgres
restart, SQLite busy) stays queued and is retried with backoff until the database answers: the work is
done and only lives here, so giving up would lose it. Any other error is a bug (or a finish hook that
raises, ``relay.batches.hooks``): the group is written again one batch per transaction, so only the
failing batch's items are dropped (logged); they stay ``running`` in the database until the rescue
bound settles them. Known limit: a hook that fails every time for a batch then fails the rescue
transaction that would finish it, with the other batches rescued in that pass (retried each pass), so
such a hook must be fixed, not waited out.

Invariants. An item is in :attr:`pending` from :meth:`add` until its transaction commits (or the
database says it is no longer this replica's). ``on_settled`` is called once per item, after that.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from relay.background import Loop
from relay.batches.item_result import ItemResult, response_lost
from relay.batches.outage import outage_backoff, report_outage, retry_if_transient
from relay.domain.batches import ResponseRef
from relay.payloads.base import KeptResponse
from relay.store.batch_queue import BatchStore, Db, FinalItem
from relay.store.batch_queue import SaveResponses as SaveFinals
from relay.store.engine import Connection
from relay.store.held import Turns

log = logging.getLogger("relay.batches")

Key = tuple[str, int]
SaveResponses = Callable[[Connection, list[tuple[str, str, int, KeptResponse]]], Awaitable[None]]
MAX_GROUP = 500  # items per transaction: bounds the statement sizes and the time locks are held
GROUP_INTERVAL_S = 0.025  # the shortest time from one group's start to the next's (module docstring)


class Finalizer:
    def __init__(
        self,
        store: BatchStore,
        instance_id: str,
        on_settled: Callable[[Key, ItemResult, bool], None],
        flush_responses: Callable[[], Awaitable[None]],
        save_responses: SaveResponses | None = None,
        turns: Turns | None = None,
    ) -> None:
        self._store = store  # its finish hooks run in the group's transaction
        self._held = store.held()  # the group transactions' connection, kept between groups, unless
        self._turns: Turns = turns if turns is not None else self._held  # it takes turns in a shared one
        self._flush_responses = flush_responses
        self._save_responses = save_responses
        self._instance_id = instance_id
        self._on_settled = on_settled  # (key, result, finalized here?) once per item
        self.pending: dict[Key, ItemResult] = {}
        self._arrived = asyncio.Event()
        self._next_group_at = 0.0  # the loop's clock: no group starts before (GROUP_INTERVAL_S)
        self._loop = Loop(
            "batch-finalizer", self._write_group, backoff=outage_backoff(), report=report_outage
        )

    def start(self) -> None:
        self._loop.launch()

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
        await self._loop.stop()
        await self._held.close()

    async def _write_group(self) -> None:
        """Wait for finished items, then write one group of them; a transient error leaves the group
        queued (the loop retries it after its backoff)."""
        if not self.pending:
            await self._arrived.wait()
            self._arrived.clear()
            return
        clock = asyncio.get_running_loop()
        wait = self._next_group_at - clock.time()
        if wait > 0 and len(self.pending) < MAX_GROUP:
            await asyncio.sleep(wait)  # under load: let the group grow (module docstring)
        self._next_group_at = clock.time() + GROUP_INTERVAL_S
        group = await self._flushed(list(self.pending.items())[:MAX_GROUP])
        failed: set[Key] = set()
        try:
            async with self._turns.use() as db:
                done = await self._finalize(db, group)
        except Exception as exc:
            retry_if_transient(exc, f"finalizing {len(group)} batch items")
            log.exception("finalizing %d batch items failed; retrying them batch by batch", len(group))
            done, failed = await self._by_batch(group)
        for key, result in group:
            del self.pending[key]
            if key not in failed:
                self._on_settled(key, result, key in done)

    async def _finalize(self, db: Db, group: list[tuple[Key, ItemResult]]) -> set[Key]:
        return await self._store.finalize_many(
            self._instance_id,
            [
                FinalItem(key[0], key[1], r.state, r.status, r.error, r.event, _ref(r.response))
                for key, r in group
            ],
            self._saver(dict(group)),
            db=db,
        )

    async def _by_batch(self, group: list[tuple[Key, ItemResult]]) -> tuple[set[Key], set[Key]]:
        """After a group failed with a non-transient error: each batch's items in a transaction of
        their own, so what fails (a finish hook that raises, say) fails only its own batch's items,
        which are left to the rescue. Returns (finalized, failed)."""
        by_batch: dict[str, list[tuple[Key, ItemResult]]] = {}
        for key, result in group:
            by_batch.setdefault(key[0], []).append((key, result))
        done: set[Key] = set()
        failed: set[Key] = set()
        for batch_id, part in by_batch.items():
            try:
                async with self._turns.use() as db:
                    done |= await self._finalize(db, part)
            except Exception:
                log.exception(
                    "finalizing %d items of batch %s failed; left to the rescue", len(part), batch_id
                )
                failed.update(key for key, _ in part)
        return done, failed

    def _saver(self, results: dict[Key, ItemResult]) -> SaveFinals | None:
        """What writes the group's kept bodies inside its transaction, for the items finalized."""
        save = self._save_responses
        if save is None:
            return None

        async def saver(conn: Connection, done: list[FinalItem]) -> None:
            kept = []
            for final in done:
                result = results[(final.batch_id, final.idx)]
                if result.response is not None:
                    kept.append((result.store, final.batch_id, final.idx, result.response))
            if kept:
                await save(conn, kept)

        return saver

    async def _flushed(self, group: list[tuple[Key, ItemResult]]) -> list[tuple[Key, ItemResult]]:
        """The group, once its response bodies are on disk (before its rows point at them). If that
        fails, its completed items cannot give their responses: they become discarded."""
        try:
            await self._flush_responses()
        except OSError as exc:
            log.error("batch response bodies could not be put on disk: %s", exc)
            group = [(key, response_lost(r, exc) if r.response else r) for key, r in group]
            self.pending.update(group)
        return group


def _ref(kept: KeptResponse | None) -> ResponseRef | None:
    return kept.ref if kept is not None else None
