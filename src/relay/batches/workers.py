"""This replica's batch worker pool (SPEC §10.6): claim, run, heartbeat, rescue, cancel, drain.

What it does. A dispatcher task claims up to the free slots (``RELAY_BATCH_WORKERS``) with
``queue.claim`` — one batch per claim, the least recently served first (the queue's fair order) — and
runs each item as its own task through :class:`relay.batches.runner.ItemRunner`. When nothing is
available it polls again after a short, growing sleep (50 → 200 ms), and wakes at once when a slot frees
up. A second task heartbeats every few seconds and periodically rescues items left ``running`` by dead
replicas (``worker lost: ``). :meth:`cancel_batch` stops this replica's running items of a batch
(they become ``cancelled``). :meth:`stop` stops claiming, lets running items finish for up to
``RELAY_SHUTDOWN_GRACE_S``, puts the rest back to ``available`` and removes the worker row.

What it deliberately does not know. What an item is (the runner) and SQL (the queue and recovery).

Invariants. An item this pool claimed always ends in exactly one of: finalized by its task (completed,
discarded or cancelled), put back by :meth:`stop`, or — if this process dies — rescued by another
replica. A task that is finalizing is never cancelled (only the execution phase is).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches import queue, recovery
from relay.batches.runner import ItemRunner, cancelled_event, item_event

log = logging.getLogger("relay.batches")

_Key = tuple[str, int]


class WorkerPool:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        runner: ItemRunner,
        instance_id: str,
        size: int,
        rescue_after_s: float,
        heartbeat_s: float = 5.0,
        poll_min_s: float = 0.05,
        poll_max_s: float = 0.2,
    ) -> None:
        self._engine = engine
        self._runner = runner
        self._instance_id = instance_id
        self._size = size
        self._rescue_after_s = rescue_after_s
        self._heartbeat_s = heartbeat_s
        self._poll_min_s = poll_min_s
        self._poll_max_s = poll_max_s
        self._tasks: dict[_Key, asyncio.Task[None]] = {}
        self._items: dict[_Key, queue.ClaimedItem] = {}
        self._executing: set[_Key] = set()  # items whose execution (not finalize) is in progress
        self._cancel_requested: set[_Key] = set()
        # Batches cancelled through this replica (recent ones): an item whose claim raced the cancel
        # (claimed before it committed, registered here after it) is cancelled instead of run.
        self._cancelled_batches: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._liveness: asyncio.Task[None] | None = None

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        await recovery.heartbeat(self._engine, self._instance_id)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="batch-dispatcher")
        self._liveness = asyncio.create_task(self._live(), name="batch-liveness")

    # -------------------------------------------------------------------------------------- dispatch

    async def _dispatch(self) -> None:
        idle = self._poll_min_s
        while not self._stopping:
            free = self._size - len(self._tasks)
            if free <= 0:
                await self._sleep(self._poll_max_s)
                continue
            try:
                claimed = await queue.claim(self._engine, self._instance_id, free)
            except Exception:
                log.exception("batch claim failed; retrying")
                await self._sleep(1.0)
                continue
            if not claimed:
                await self._sleep(idle)
                idle = min(idle * 2, self._poll_max_s)
                continue
            idle = self._poll_min_s
            for item in claimed:
                key = (item.batch_id, item.idx)
                self._items[key] = item
                self._executing.add(key)
                task = asyncio.create_task(self._run(item), name=f"batch-item-{item.batch_id}-{item.idx}")
                self._tasks[key] = task
                task.add_done_callback(self._on_done(key))

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _on_done(self, key: _Key) -> Callable[[asyncio.Task[None]], None]:
        return lambda _task: self._done(key)

    def _done(self, key: _Key) -> None:
        self._tasks.pop(key, None)
        self._items.pop(key, None)
        self._executing.discard(key)
        self._cancel_requested.discard(key)
        self._wake.set()

    async def _run(self, item: queue.ClaimedItem) -> None:
        key = (item.batch_id, item.idx)
        try:
            if item.batch_id in self._cancelled_batches:
                raise asyncio.CancelledError
            result = await self._runner.execute(item)
        except asyncio.CancelledError:
            requested = key in self._cancel_requested
            if not requested and item.batch_id not in self._cancelled_batches:
                raise  # shutdown past its grace: stop() puts the item back
            current = asyncio.current_task()
            if requested and current is not None:
                current.uncancel()
            result = self._runner.cancelled(item)
        except Exception as exc:
            log.exception("batch item %s/%d failed inside Relay", item.batch_id, item.idx)
            result = self._runner.failed(item, exc)
        self._executing.discard(key)
        try:
            if not await self._runner.finish(item, result):
                log.info("batch item %s/%d was no longer ours to finish", item.batch_id, item.idx)
        except Exception:
            log.exception(
                "finalizing batch item %s/%d failed; rescue will settle it", item.batch_id, item.idx
            )

    async def cancel_batch(self, batch_id: str) -> int:
        """Stop this replica's running items of ``batch_id``; each becomes ``cancelled``. Returns how many."""
        self._cancelled_batches[batch_id] = None
        while len(self._cancelled_batches) > 10_000:
            del self._cancelled_batches[next(iter(self._cancelled_batches))]
        stopped = 0
        for key, task in list(self._tasks.items()):
            if key[0] == batch_id and key in self._executing and key not in self._cancel_requested:
                self._cancel_requested.add(key)
                task.cancel()
                stopped += 1
        if stopped:
            await asyncio.gather(
                *(t for k, t in list(self._tasks.items()) if k[0] == batch_id), return_exceptions=True
            )
        return stopped

    # -------------------------------------------------------------------------------------- liveness

    async def _live(self) -> None:
        last_rescue = 0.0
        while not self._stopping:
            try:
                await recovery.heartbeat(self._engine, self._instance_id)
                if time.monotonic() - last_rescue >= 2 * self._heartbeat_s:
                    last_rescue = time.monotonic()
                    rescued = await recovery.rescue(
                        self._engine,
                        stale_after_s=3 * self._heartbeat_s,
                        rescue_after_s=self._rescue_after_s,
                        events_for=lambda items: [
                            item_event(r.batch, r.idx, error_kind="worker_lost", error_message=r.error)
                            for r in items
                        ],
                    )
                    if rescued:
                        log.warning("rescued %d batch items of lost replicas", len(rescued))
            except Exception:
                log.exception("batch heartbeat or rescue failed; retrying")
            await asyncio.sleep(self._heartbeat_s)

    # -------------------------------------------------------------------------------------- stop

    async def stop(self, grace_s: float) -> None:
        """Stop claiming; let running items finish for up to ``grace_s``; put the rest back."""
        if self._stopping:
            return
        self._stopping = True
        self._wake.set()
        if self._dispatcher is not None:
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        if self._liveness is not None:
            self._liveness.cancel()
            await asyncio.gather(self._liveness, return_exceptions=True)
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        unfinished = {k: t for k, t in self._tasks.items() if not t.done() and k in self._items}
        left = {k: self._items[k] for k in unfinished}
        for task in unfinished.values():
            task.cancel()
        if unfinished:
            await asyncio.gather(*unfinished.values(), return_exceptions=True)
        try:
            if left:
                back = await recovery.put_back(
                    self._engine,
                    self._instance_id,
                    list(left),
                    events_for=lambda pairs: [cancelled_event(left[p].batch, p[1]) for p in pairs],
                )
                log.info("put %d unfinished batch items back", back)
            await recovery.forget_worker(self._engine, self._instance_id)
        except Exception:
            log.exception("batch worker shutdown could not put items back; rescue will settle them")
