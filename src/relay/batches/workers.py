"""This replica's batch worker pool (SPEC §10.6): claim, run, cancel, drain.

What it does. A dispatcher task claims (reserves) items with ``BatchStore.claim`` — one batch per claim,
of the project served least recently (the queue's fair order) — into a small local queue of ``ready``
items (:class:`ReadyQueue`, which keeps that order across projects and batches), and
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
soon as the run ends. Heartbeat, rescue and orphan put-back are :class:`relay.batches.liveness.Liveness`'s
(it asks :meth:`WorkerPool.orphans` which items the database shows as this replica's are not the pool's).
:meth:`cancel_batch` stops this replica's running items of a batch (they become ``cancelled``) and
forgets its ready ones (the cancel already cancelled them in the database). :meth:`stop` stops
claiming, lets running items finish for up to ``RELAY_SHUTDOWN_GRACE_S``, writes what finished, puts
the rest back to ``available`` (releasing reservations); the liveness then removes the worker row.

What it deliberately does not know. What an item is (the runner) and SQL (the batch store,
``relay.store.batch_queue``).

Database outages (a Postgres restart, SQLite's lock busy). Claims simply try again; the finalizer
keeps finished results and retries until the database answers, so an outage loses no work.

Invariants. ``_items`` holds every item this pool claimed and has not settled (ready, starting,
running or waiting for its finalize). Each ends in exactly one of: finalized (completed, discarded or
cancelled), not started (cancelled or taken elsewhere: dropped), put back by :meth:`stop` or by the
orphan check, or — if this process dies — rescued (running) or released (reserved) by another replica.
No item reaches the pipeline unless its start committed. Cancelling a batch stops only the execution
of its items, never a write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from relay.background import DONE, Backoff, Loop, PauseFor
from relay.batches.finalizer import Finalizer
from relay.batches.holds import PolicyHolds
from relay.batches.liveness import put_back_events
from relay.batches.outage import log_database_failure
from relay.batches.pacing import ClaimPacer
from relay.batches.runner import ItemHeld, ItemResult, ItemRunner, Prepared
from relay.batches.starter import Starter
from relay.request.limit_plans import MAX_CONCURRENCY_METER
from relay.store.batch_queue import BatchStore, ClaimedItem
from relay.telemetry.metrics import BatchMetrics

log = logging.getLogger("relay.batches")

_Key = tuple[str, int]
CLAIM_RETRY_S = 1.0  # after a failed claim (the database is away)


Body = asyncio.Future[bytes | None]  # an item's request body, read ahead when it was claimed


class ReadyQueue:
    """Claimed items waiting for a slot, with their bodies read ahead, in the claim's fair order (SPEC
    §17): round-robin across projects, then across the project's batches, then idx order within a
    batch. So a project whose batch was claimed after another project's claim-ahead does not queue
    behind all of it, and a project with many batches gets no more slots than one with a single batch.
    """

    __slots__ = ("_by_project", "_count")

    def __init__(self) -> None:
        # project → batch → items; both dicts in turn order (the one served longest ago first).
        self._by_project: dict[str, dict[str, deque[tuple[ClaimedItem, Body | None]]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, item: ClaimedItem, body: Body | None) -> None:
        batches = self._by_project.setdefault(item.batch.project_id, {})
        batches.setdefault(item.batch_id, deque()).append((item, body))
        self._count += 1

    def pop(self) -> tuple[ClaimedItem, Body | None]:
        """The next item of the project served longest ago, from its batch served longest ago (call
        only when not empty). Both go to the back of their turns."""
        project_id = next(iter(self._by_project))
        batches = self._by_project.pop(project_id)
        batch_id = next(iter(batches))
        waiting = batches.pop(batch_id)
        entry = waiting.popleft()
        if waiting:
            batches[batch_id] = waiting
        if batches:
            self._by_project[project_id] = batches
        self._count -= 1
        return entry

    def drop_policy(self, policy_id: str) -> list[ClaimedItem]:
        """Forget the waiting items of a policy's batches (the policy is held back by pacing)."""
        dropped: list[ClaimedItem] = []
        held = [
            batch_id
            for batches in self._by_project.values()
            for batch_id, waiting in batches.items()
            if waiting[0][0].batch.policy_id == policy_id
        ]
        for batch_id in held:
            dropped += self.drop_batch(batch_id)
        return dropped

    def drop_batch(self, batch_id: str) -> list[ClaimedItem]:
        """Forget a batch's waiting items (a cancel or expiry); returns them."""
        for project_id, batches in self._by_project.items():
            if batch_id in batches:
                dropped = [item for item, _ in batches.pop(batch_id)]
                if not batches:
                    del self._by_project[project_id]
                self._count -= len(dropped)
                return dropped
        return []


class WorkerPool:
    def __init__(
        self,
        *,
        store: BatchStore,
        runner: ItemRunner,
        instance_id: str,
        size: int,
        grace_s: float = 30.0,
        poll_min_s: float = 0.05,
        poll_max_s: float = 0.2,
        metrics: BatchMetrics | None = None,
    ) -> None:
        self._store = store  # its finish hooks run in every transaction here that finishes a batch
        self._runner = runner
        self._instance_id = instance_id
        self._size = size
        self._grace_s = grace_s
        self._poll_max_s = poll_max_s
        self._metrics = metrics
        self._pacer = ClaimPacer(size)
        self._holds = PolicyHolds()  # policies held back by pacing (SPEC §17): not claimed meanwhile
        self._waiting: dict[str, set[_Key]] = {}  # policy id → items put back for room, not run since
        self._claiming = asyncio.Lock()  # held from a claim until its items are registered
        self._items: dict[_Key, ClaimedItem] = {}  # claimed, not settled (module docstring)
        self._ready = ReadyQueue()  # claimed, waiting for a slot
        self._tasks: dict[_Key, asyncio.Task[None]] = {}  # running
        self._executing: set[_Key] = set()  # items whose execution (not finalize) is in progress
        self._finalizer = Finalizer(
            store, instance_id, self._settled, runner.flush_responses, runner.save_responses
        )
        self._starter = Starter(store, instance_id)
        self._claim_db = store.held()  # the dispatcher's claims' connection (relay.store.held)
        # Running items a cancel (or expiry) stops here: the error they end with (None: "cancelled").
        self._cancelling: dict[_Key, str | None] = {}
        self._stopping = False
        self._idle = Backoff(poll_min_s, poll_max_s)  # nothing to claim: poll again after 50 → 200 ms
        self._dispatching = Loop(
            "batch-dispatcher",
            self._dispatch,
            backoff=Backoff(CLAIM_RETRY_S, CLAIM_RETRY_S),
            report=lambda _name, exc, _delay: log_database_failure(
                "batch claim failed; retrying in 1 s", exc
            ),
        )

    async def start(self) -> None:
        """Start claiming (after :class:`~relay.batches.liveness.Liveness` registered this replica)."""
        if self._dispatching.running or self._stopping:
            return
        self._finalizer.start()
        self._starter.open()
        await self._dispatching.start()

    async def orphans(self) -> list[_Key]:
        """Items the database says this replica runs or reserved but this pool does not know: a claim
        or start whose COMMIT landed while its answer was lost. Asked under the claim lock, so a claim
        in flight is not taken for one."""
        async with self._claiming:
            held = await self._store.held_by(self._instance_id)
            return [key for key in held if key not in self._items]

    # -------------------------------------------------------------------------------------- dispatch

    async def _dispatch(self) -> object:
        """Top up the ready queue by one claim, as far as the pacer wants; the pause after it depends
        on what came back. A finished item wakes the next turn at once."""
        if self._stopping:
            return DONE
        self._start_ready()
        want = self._pacer.want(len(self._tasks), len(self._ready))
        if not want:  # enough in hand: claim when a group's worth is missing
            return PauseFor(self._poll_max_s)
        async with self._claiming:
            started = time.monotonic()
            async with self._claim_db.use() as db:
                claimed = await self._store.claim(
                    self._instance_id, want, db=db, skip_policies=self._holds.held()
                )
            self._pacer.claimed(time.monotonic() - started, got=len(claimed))
            bodies = self._runner.prefetch(claimed[0].batch, [c.idx for c in claimed]) if claimed else {}
            for item in claimed:
                self._items[(item.batch_id, item.idx)] = item
                self._ready.add(item, bodies.get(item.idx))
        self._start_ready()
        if not claimed:
            return PauseFor(self._idle.next())
        self._idle.reset()
        return PauseFor(0.0)

    def _start_ready(self) -> None:
        while self._ready and len(self._tasks) < self._size and not self._stopping:
            item, body = self._ready.pop()
            key = (item.batch_id, item.idx)
            self._executing.add(key)
            task = asyncio.create_task(self._run(item, body), name=f"batch-item-{item.batch_id}-{item.idx}")
            self._tasks[key] = task
            task.add_done_callback(self._on_done(key))
        if self._metrics is not None:
            self._metrics.busy(len(self._tasks))

    def _on_done(self, key: _Key) -> Callable[[asyncio.Task[None]], None]:
        return lambda _task: self._done(key)

    def _done(self, key: _Key) -> None:
        self._tasks.pop(key, None)
        self._executing.discard(key)
        self._pacer.finished()
        self._cancelling.pop(key, None)
        self._start_ready()  # the slot takes its next item now, not at the dispatcher's next turn
        self._dispatching.wake()

    def _settled(self, key: _Key, result: ItemResult, finalized: bool) -> None:
        """The finalizer wrote (or found already settled elsewhere) this item."""
        self._items.pop(key, None)
        if not finalized:
            # Per item, so DEBUG: a cancel or a rescue settles thousands at once and logs its own line.
            log.debug("batch item %s/%d was no longer ours to finish", key[0], key[1])
        elif self._metrics is not None:
            self._metrics.finished.labels(result.state).inc()
            if result.state != "cancelled":  # ran to an answer or a failure: how long it took
                self._metrics.duration.labels(result.state).observe(result.event.latency_ms / 1000)

    async def _run(self, item: ClaimedItem, body: Body | None) -> None:
        """Prepare (admission: SPEC §17), start, run, and hand the result to the finalizer. An item
        held back by pacing goes back ``available`` instead; its slot is free at once."""
        key = (item.batch_id, item.idx)
        prepared: Prepared | None = None
        try:
            if self._holds.is_held(item.batch.policy_id):  # held since it was claimed: not tried now
                await self._put_back([item, *self._ready.drop_policy(item.batch.policy_id)], None)
                return
            try:
                prepared = await self._runner.prepare(item, body)
            except ItemHeld as held:
                await self._held(item, held)
                return
            self._admitted(key, item.batch.policy_id)
            if not await self._starter.start(key):
                # Cancelled (on any replica) or taken by another replica since we reserved it.
                self._executing.discard(key)
                self._items.pop(key, None)
                await self._runner.release(prepared)
                return
            if self._metrics is not None:
                self._metrics.started.labels(item.batch.project_id).inc()
            try:
                result = await self._runner.run(prepared)
            except ItemHeld as held:  # every key turned out open or probing once it ran
                await self._held(item, held)
                return
            self._holds.lift(item.batch.policy_id, MAX_CONCURRENCY_METER)  # its lease is free again
        except asyncio.CancelledError:
            if prepared is not None:
                await self._runner.release(prepared)
            if key not in self._cancelling:
                raise  # shutdown past its grace: stop() puts the item back
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()
            # Stopped by a cancel here; if its start had not committed, the finalizer finds it
            # cancelled already and writes nothing.
            result = self._runner.cancelled(item, self._cancelling.get(key))
        except Exception as exc:
            log.exception("batch item %s/%d failed inside Relay", item.batch_id, item.idx)
            result = self._runner.failed(item, exc)
        self._executing.discard(key)
        self._finalizer.add(key, result)

    # -------------------------------------------------------------------------------------- pacing

    async def _held(self, item: ClaimedItem, held: ItemHeld) -> None:
        """No room for ``item`` (SPEC §17 ``pacing: "wait"``): hold its policy, and put it and the
        policy's other reserved items back ``available`` (nothing charged, no attempt counted)."""
        seconds = self._holds.hold(held.policy_id, held.retry_after, held.meter)
        if self._metrics is not None:
            self._metrics.pacing_waits.labels(held.policy_id, held.meter).inc()
        log.debug("batch items of policy %s held back %.2f s (%s)", held.policy_id, seconds, held.meter)
        await self._put_back([item, *self._ready.drop_policy(held.policy_id)], held.policy_id)

    async def _put_back(self, items: list[ClaimedItem], waiting_policy: str | None) -> None:
        keys = [(i.batch_id, i.idx) for i in items]
        for key in keys:
            self._items.pop(key, None)
            self._executing.discard(key)
        if waiting_policy is not None:
            self._waiting.setdefault(waiting_policy, set()).update(keys)
            self._waiting_changed(waiting_policy)
        try:
            await self._store.put_back(self._instance_id, keys, events_for=put_back_events)
        except Exception as exc:  # the orphan check puts them back once the database answers
            log_database_failure("putting paced batch items back failed; the orphan check will", exc)

    def _admitted(self, key: _Key, policy_id: str) -> None:
        waiting = self._waiting.get(policy_id)
        if waiting is not None and key in waiting:
            waiting.discard(key)
            self._waiting_changed(policy_id)

    def _waiting_changed(self, policy_id: str) -> None:
        waiting = self._waiting.get(policy_id, set())
        if self._metrics is not None:
            self._metrics.waiting.labels(policy_id).set(len(waiting))
        if not waiting:
            self._waiting.pop(policy_id, None)

    async def cancel_batch(self, batch_id: str, error: str | None = None) -> int:
        """After ``BatchStore.cancel`` (or an expiry) committed: stop this replica's running items of
        ``batch_id`` (each becomes ``cancelled``, with ``error`` when given, else ``"cancelled"``) and
        forget its reserved ones (the cancel cancelled them, and their start would fail anyway).
        Returns how many were stopped or forgotten."""
        stopped = 0
        for policy_id, waiting in list(self._waiting.items()):
            if any(key[0] == batch_id for key in waiting):
                waiting.difference_update([key for key in waiting if key[0] == batch_id])
                self._waiting_changed(policy_id)
        for item in self._ready.drop_batch(batch_id):  # reserved, not started
            self._items.pop((item.batch_id, item.idx), None)
            stopped += 1
        for key, task in list(self._tasks.items()):
            if key[0] == batch_id and key in self._executing and key not in self._cancelling:
                self._cancelling[key] = error
                task.cancel()
                stopped += 1
        if stopped:
            await asyncio.gather(
                *(t for k, t in list(self._tasks.items()) if k[0] == batch_id), return_exceptions=True
            )
            await self._finalizer.drain(5.0)  # the caller answers once they are cancelled, if it can
        return stopped

    # -------------------------------------------------------------------------------------- stop

    async def stop(self) -> None:
        """Stop claiming; let running items finish for up to ``grace_s``; put the rest back."""
        if self._stopping or not self._dispatching.running:
            return
        grace_s = self._grace_s
        self._stopping = True
        self._dispatching.wake()
        await self._dispatching.finished(None)  # a claim in flight registers its items first
        await self._dispatching.stop()
        await self._claim_db.close()
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
                back = await self._store.put_back(self._instance_id, held, events_for=put_back_events)
                log.info("put %d unfinished batch items back", back)
        except Exception:
            log.exception("batch worker shutdown could not put items back; rescue will settle them")
