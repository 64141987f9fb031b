"""This replica's batch worker pool (SPEC §10.6): claim, run, heartbeat, rescue, cancel, drain.

What it does. A dispatcher task claims (reserves) items with ``BatchStore.claim`` — one batch per claim, the
least recently served first (the queue's fair order) — into a small local queue of ``ready`` items, and
keeps up to ``RELAY_BATCH_WORKERS`` of them running, each as its own task through
:class:`relay.batches.runner.ItemRunner`. A ready item is still ``available`` in the database (SPEC
§10.2): its task first asks the :class:`~relay.batches.starter.Starter` to make it ``running`` (one
grouped, conditional statement) and runs it only if that succeeded; an item cancelled meanwhile, on any
replica, is dropped unrun. It claims ahead, as far as
:class:`~relay.batches.pacing.ClaimPacer` says (at least one ready item per slot, more when items
finish faster than claims come back), so a freed slot starts its next item at once, without waiting
for a claim, and claims come in groups; the request bodies of a claim's items are read ahead
then (``database``: one query per claim; ``files``: one worker-thread hop). The dispatcher, the
starter and the finalizer each keep one Postgres connection between their statements
(``relay.store.held``: no pool checkout and pre-ping per claim, start or finalize group). When
nothing is available it polls
again after a short, growing sleep (50 → 200 ms). A finished item's result goes to the
:class:`~relay.batches.finalizer.Finalizer`, which writes final states in groups; the slot is free as
soon as the run ends. A second task heartbeats every ``RELAY_BATCH_HEARTBEAT_S`` and every second
heartbeat rescues items left ``running`` by dead replicas (``worker lost: ``), releases their
reservations, puts back this replica's orphans (items a claim or start committed although its answer
never arrived, e.g. the connection died at COMMIT) and refreshes the ``relay_batch_items`` gauge.
:meth:`cancel_batch` stops this replica's running items of a batch (they become ``cancelled``) and
forgets its ready ones (the cancel already cancelled them in the database). :meth:`stop` stops
claiming, lets running items finish for up to ``RELAY_SHUTDOWN_GRACE_S``, writes what finished, puts
the rest back to ``available`` (releasing reservations) and removes the worker row.

What it deliberately does not know. What an item is (the runner) and SQL (the batch store,
``relay.store.batch_queue``).

Database outages (a Postgres restart, SQLite's lock busy). Claims and heartbeats simply try again; the
finalizer keeps finished results and retries until the database answers, so an outage loses no work. A
replica does not rescue on staleness until its own connection has been healthy for ``3 × heartbeat``:
right after an outage every replica's heartbeat looks stale, and the others need one heartbeat to show
they are alive.

Invariants. ``_items`` holds every item this pool claimed and has not settled (ready, starting,
running or waiting for its finalize). Each ends in exactly one of: finalized (completed, discarded or
cancelled), not started (cancelled or taken elsewhere: dropped), put back by :meth:`stop` or by the
orphan check, or — if this process dies — rescued (running) or released (reserved) by another replica.
No item reaches the pipeline unless its start committed. Cancelling a batch stops only the execution
of its items, never a write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from relay.batches.finalizer import Finalizer
from relay.batches.pacing import ClaimPacer
from relay.batches.runner import ItemResult, ItemRunner
from relay.batches.starter import Starter
from relay.domain.batch_record import CANCELLED_ERROR, BatchRecord, stop_error
from relay.store.batch_queue import BatchStore, ClaimedItem
from relay.store.engine import is_transient
from relay.telemetry.metrics import BatchMetrics
from relay.usage.event import UsageEvent, cancelled_event, item_event

log = logging.getLogger("relay.batches")

_Key = tuple[str, int]


class WorkerPool:
    def __init__(
        self,
        *,
        store: BatchStore,
        runner: ItemRunner,
        instance_id: str,
        size: int,
        rescue_after_s: float,
        heartbeat_s: float = 5.0,
        poll_min_s: float = 0.05,
        poll_max_s: float = 0.2,
        metrics: BatchMetrics | None = None,
    ) -> None:
        self._store = store  # its finish hooks run in every transaction here that finishes a batch
        self._runner = runner
        self._instance_id = instance_id
        self._size = size
        self._rescue_after_s = rescue_after_s
        self._heartbeat_s = heartbeat_s
        self._poll_min_s = poll_min_s
        self._poll_max_s = poll_max_s
        self._metrics = metrics
        self._stale_after_s = 3 * heartbeat_s
        self._pacer = ClaimPacer(size)
        self._claiming = asyncio.Lock()  # held from a claim until its items are registered
        self._db_ok_since: float | None = None  # monotonic time of the first heartbeat after an outage
        self._items: dict[_Key, ClaimedItem] = {}  # claimed, not settled (module docstring)
        # Claimed, waiting for a slot: per batch, served round-robin (so a batch claimed after a big
        # one's claim-ahead does not queue behind it), idx order within a batch.
        self._ready: dict[str, deque[ClaimedItem]] = {}
        self._ready_count = 0
        self._bodies: dict[_Key, asyncio.Future[bytes | None]] = {}  # ready items' request bodies read ahead
        self._tasks: dict[_Key, asyncio.Task[None]] = {}  # running
        self._executing: set[_Key] = set()  # items whose execution (not finalize) is in progress
        self._finalizer = Finalizer(
            store, instance_id, self._settled, runner.flush_responses, runner.save_responses
        )
        self._starter = Starter(store, instance_id)
        self._claim_db = store.held()  # the dispatcher's claims' connection (relay.store.held)
        self._cancel_requested: set[_Key] = set()
        self._stop_errors: dict[_Key, str] = {}  # a stop with another error than "cancelled" (expiry)
        self._wake = asyncio.Event()
        self._stopping = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._liveness: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._store.heartbeat(self._instance_id)
        self._db_ok_since = time.monotonic()
        self._finalizer.start()
        self._starter.open()
        self._dispatcher = asyncio.create_task(self._dispatch(), name="batch-dispatcher")
        self._liveness = asyncio.create_task(self._live(), name="batch-liveness")

    # -------------------------------------------------------------------------------------- dispatch

    async def _dispatch(self) -> None:
        idle = self._poll_min_s
        while not self._stopping:
            self._start_ready()
            running = len(self._tasks)
            want = self._pacer.want(running, self._ready_count)
            if not want:  # enough in hand: claim when a group's worth is missing
                await self._sleep(self._poll_max_s)
                continue
            async with self._claiming:
                started = time.monotonic()
                claimed: list[ClaimedItem] | None = None
                try:
                    async with self._claim_db.use() as db:
                        claimed = await self._store.claim(self._instance_id, want, db=db)
                except Exception as exc:
                    _log_failure("batch claim failed; retrying in 1 s", exc)
                else:
                    self._pacer.claimed(time.monotonic() - started, got=len(claimed))
                bodies = self._runner.prefetch(claimed[0].batch, [c.idx for c in claimed]) if claimed else {}
                for item in claimed or ():
                    key = (item.batch_id, item.idx)
                    self._items[key] = item
                    if item.idx in bodies:
                        self._bodies[key] = bodies[item.idx]
                    self._ready.setdefault(item.batch_id, deque()).append(item)
                    self._ready_count += 1
            self._start_ready()
            if claimed is None:
                await self._sleep(1.0)
            elif not claimed:
                await self._sleep(idle)
                idle = min(idle * 2, self._poll_max_s)
            else:
                idle = self._poll_min_s

    def _start_ready(self) -> None:
        while self._ready and len(self._tasks) < self._size and not self._stopping:
            batch_id = next(iter(self._ready))
            waiting = self._ready.pop(batch_id)
            item = waiting.popleft()
            if waiting:
                self._ready[batch_id] = waiting  # to the back: the next slot serves another batch
            self._ready_count -= 1
            key = (item.batch_id, item.idx)
            self._executing.add(key)
            task = asyncio.create_task(self._run(item), name=f"batch-item-{item.batch_id}-{item.idx}")
            self._tasks[key] = task
            task.add_done_callback(self._on_done(key))
        if self._metrics is not None:
            self._metrics.busy(len(self._tasks))

    async def _sleep(self, seconds: float) -> None:
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)

    def _on_done(self, key: _Key) -> Callable[[asyncio.Task[None]], None]:
        return lambda _task: self._done(key)

    def _done(self, key: _Key) -> None:
        self._tasks.pop(key, None)
        self._executing.discard(key)
        self._pacer.finished()
        self._cancel_requested.discard(key)
        self._stop_errors.pop(key, None)
        self._start_ready()  # the slot takes its next item now, not at the dispatcher's next turn
        self._wake.set()

    def _settled(self, key: _Key, result: ItemResult, finalized: bool) -> None:
        """The finalizer wrote (or found already settled elsewhere) this item."""
        self._items.pop(key, None)
        if not finalized:
            log.info("batch item %s/%d was no longer ours to finish", key[0], key[1])
        elif self._metrics is not None:
            self._metrics.finished.labels(result.state).inc()

    async def _run(self, item: ClaimedItem) -> None:
        key = (item.batch_id, item.idx)
        body = self._bodies.pop(key, None)
        try:
            if not await self._starter.start(key):
                # Cancelled (on any replica) or taken by another replica since we reserved it.
                self._executing.discard(key)
                self._items.pop(key, None)
                return
            result = await self._runner.execute(item, body)
        except asyncio.CancelledError:
            if key not in self._cancel_requested:
                raise  # shutdown past its grace: stop() puts the item back
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            # Stopped by a cancel here; if its start had not committed, the finalizer finds it
            # cancelled already and writes nothing.
            result = self._runner.cancelled(item, self._stop_errors.get(key))
        except Exception as exc:
            log.exception("batch item %s/%d failed inside Relay", item.batch_id, item.idx)
            result = self._runner.failed(item, exc)
        self._executing.discard(key)
        self._finalizer.add(key, result)

    async def cancel_batch(self, batch_id: str, error: str | None = None) -> int:
        """After ``BatchStore.cancel`` (or an expiry) committed: stop this replica's running items of
        ``batch_id`` (each becomes ``cancelled``, with ``error`` when given, else ``"cancelled"``) and
        forget its reserved ones (the cancel cancelled them, and their start would fail anyway).
        Returns how many were stopped or forgotten."""
        stopped = 0
        for item in self._ready.pop(batch_id, ()):  # reserved, not started
            self._ready_count -= 1
            self._items.pop((item.batch_id, item.idx), None)
            self._bodies.pop((item.batch_id, item.idx), None)
            stopped += 1
        for key, task in list(self._tasks.items()):
            if key[0] == batch_id and key in self._executing and key not in self._cancel_requested:
                self._cancel_requested.add(key)
                if error is not None:
                    self._stop_errors[key] = error
                task.cancel()
                stopped += 1
        if stopped:
            await asyncio.gather(
                *(t for k, t in list(self._tasks.items()) if k[0] == batch_id), return_exceptions=True
            )
            await self._finalizer.drain(5.0)  # the caller answers once they are cancelled, if it can
        return stopped

    # -------------------------------------------------------------------------------------- liveness

    async def _live(self) -> None:
        last_pass = time.monotonic()
        while not self._stopping:
            await asyncio.sleep(self._heartbeat_s)
            try:
                await self._store.heartbeat(self._instance_id)
            except Exception as exc:
                self._db_ok_since = None
                _log_failure("batch heartbeat failed; retrying", exc)
                continue
            now = time.monotonic()
            if self._db_ok_since is None:
                self._db_ok_since = now
                log.info("batch heartbeat is back; rescue waits %g s for other replicas", self._stale_after_s)
            try:
                if now - last_pass >= 2 * self._heartbeat_s:
                    last_pass = now
                    await self._put_back_orphans()
                    if now - self._db_ok_since >= self._stale_after_s:
                        await self._rescue()
                if self._metrics is not None:
                    for state, count in (await self._store.open_counts()).items():
                        self._metrics.open.labels(state).set(count)
            except Exception as exc:
                _log_failure("batch rescue pass failed; retrying", exc)

    async def _rescue(self) -> None:
        rescued = await self._store.rescue(
            stale_after_s=self._stale_after_s,
            rescue_after_s=self._rescue_after_s,
            events_for=lambda items: [
                item_event(r.batch, r.idx, error_kind="worker_lost", error_message=r.error) for r in items
            ],
        )
        released = await self._store.release_lost_reservations(stale_after_s=self._stale_after_s)
        if released:
            log.info("released %d batch items reserved by lost replicas", released)
        if rescued:
            log.warning("rescued %d batch items of lost replicas", len(rescued))
            if self._metrics is not None:
                self._metrics.finished.labels("discarded").inc(len(rescued))
        if await self._store.expire_workers(self._rescue_after_s):
            log.info("forgot batch workers silent for more than %g s", self._rescue_after_s)

    async def _put_back_orphans(self) -> None:
        """Items the database says this replica runs or reserved but no task of it does: a claim or
        start whose COMMIT landed while its answer was lost. They go back to ``available`` (or
        ``cancelled``), unreserved."""
        async with self._claiming:
            held = await self._store.held_by(self._instance_id)
            orphans = [key for key in held if key not in self._items]
        if orphans:
            back = await self._store.put_back(self._instance_id, orphans, events_for=_cancelled_events)
            # Usually 0: a claim whose answer was lost is rare, and an item finishing while we looked
            # is not an orphan. Only putting something back is worth a warning.
            level = logging.WARNING if back else logging.DEBUG
            log.log(level, "put back %d orphaned batch items (of %d)", back, len(orphans))

    # -------------------------------------------------------------------------------------- stop

    async def stop(self, grace_s: float) -> None:
        """Stop claiming; let running items finish for up to ``grace_s``; put the rest back."""
        if self._stopping:
            return
        self._stopping = True
        self._wake.set()
        if self._dispatcher is not None:
            await asyncio.gather(self._dispatcher, return_exceptions=True)
        await self._claim_db.close()
        if self._liveness is not None:
            self._liveness.cancel()
            await asyncio.gather(self._liveness, return_exceptions=True)
        tasks = list(self._tasks.values())
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        unfinished = [t for t in self._tasks.values() if not t.done()]
        for task in unfinished:
            task.cancel()
        if unfinished:
            await asyncio.gather(*unfinished, return_exceptions=True)
        if not await self._finalizer.drain(max(grace_s, 5.0)):
            log.warning(
                "batch results not written at shutdown (database unreachable); rescue will settle them"
            )
        await self._finalizer.close()
        await self._starter.close()
        self._runner.close()
        try:
            # Whatever the database still says we run: the cancelled items and any orphan.
            held = await self._store.held_by(self._instance_id)
            if held:
                back = await self._store.put_back(self._instance_id, held, events_for=_cancelled_events)
                log.info("put %d unfinished batch items back", back)
            await self._store.forget_worker(self._instance_id)
        except Exception:
            log.exception("batch worker shutdown could not put items back; rescue will settle them")


def _cancelled_events(pairs: list[tuple[BatchRecord, int]]) -> list[UsageEvent]:
    """The events of items put back into a batch cancelled or expired meanwhile (``stop_error``)."""
    events = []
    for record, idx in pairs:
        error = stop_error(record)
        if error == CANCELLED_ERROR:
            events.append(cancelled_event(record, idx))
        else:
            events.append(item_event(record, idx, error_kind="expired", error_message=error))
    return events


def _log_failure(message: str, exc: BaseException) -> None:
    """One warning line for a database outage (it repeats while the outage lasts); a traceback for
    anything else, which is a bug."""
    if is_transient(exc):
        log.warning("%s: %s", message, type(exc).__name__)
    else:
        log.exception(message)
