"""This replica's batch worker pool (SPEC §10.6): claim, run, cancel, drain.

What it does. A dispatcher task claims (reserves) items with ``BatchStore.claim`` — one batch per claim,
of the project served least recently (the queue's fair order) — into a small local queue of ``ready``
items (:class:`relay.batches.ready.ReadyQueue`, which keeps that order across projects and batches), and
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
(``relay.store.held``: no pool checkout and pre-ping per claim, start or finalize group); on SQLite
they take turns in one connection's shared transactions (``relay.store.write_group``). When
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
from collections.abc import Callable

from relay.background import DONE, Backoff, Loop, PauseFor
from relay.batches.finalizer import Finalizer
from relay.batches.holds import MIN_HOLD_S, ItemHeld, PolicyHolds
from relay.batches.item_result import ItemResult
from relay.batches.liveness import put_back_events
from relay.batches.outage import log_database_failure
from relay.batches.pacing import ClaimPacer
from relay.batches.ready import Body, ReadyQueue
from relay.batches.rooms import ROOM_CLAIM_STEP, WindowRooms
from relay.batches.runner import ItemRunner, Prepared
from relay.batches.starter import Starter
from relay.batches.waiting import WaitingItems
from relay.request.limit_plans import MAX_CONCURRENCY_METER
from relay.store.batch_queue import BatchStore, ClaimedItem
from relay.store.held import Turns
from relay.telemetry.metrics import BatchMetrics

log = logging.getLogger("relay.batches")

_Key = tuple[str, int]
CLAIM_RETRY_S = 1.0  # after a failed claim (the database is away)


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
        self._waiting = WaitingItems(metrics)  # items put back for room, not run since
        self._preparing: dict[str, int] = {}  # policy id → its items taken from ready, not admitted yet
        self._unadmitted: dict[_Key, str] = {}  # those items → their policy id
        self._claiming = asyncio.Lock()  # held from a claim until its items are registered
        self._items: dict[_Key, ClaimedItem] = {}  # claimed, not settled (module docstring)
        self._ready = ReadyQueue()  # claimed, waiting for a slot
        self._tasks: dict[_Key, asyncio.Task[None]] = {}  # running
        self._executing: set[_Key] = set()  # items whose execution (not finalize) is in progress
        # SQLite: the claims, starts and finalizes take turns in one connection's shared transactions
        # (relay.store.write_group); Postgres: each task keeps a connection (relay.store.held).
        self._group = store.write_group()
        # Paced policies' batch shares, learnt from a refusal: the claims made when a hold ends take
        # that many, so the window's share is in hand at once (relay.batches.admissions, .rooms).
        self._rooms = WindowRooms(
            self._holds, ROOM_CLAIM_STEP["sqlite" if self._group is not None else "postgresql"]
        )
        self._finalizer = Finalizer(
            store, instance_id, self._settled, runner.flush_responses, runner.save_responses, self._group
        )
        self._starter = Starter(store, instance_id, self._group.urgent if self._group else None)
        self._claim_held = store.held()
        self._claim_db: Turns = self._group or self._claim_held
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
        if self._group is not None:
            self._group.open()
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
        normal = self._pacer.want(len(self._tasks), len(self._ready))
        room_policies, room = self._rooms.next_claim()
        want = max(normal, room)
        if not want:  # enough in hand: claim when a group's worth is missing
            return self._pause(self._poll_max_s)
        async with self._claiming:
            started = time.monotonic()
            async with self._claim_db.use() as db:
                claimed = await self._store.claim(
                    self._instance_id, want, db=db, skip_policies=self._holds.held()
                )
            self._pacer.claimed(time.monotonic() - started, got=len(claimed))
            if room > normal and (len(claimed) < want or claimed[0].batch.policy_id not in room_policies):
                self._rooms.exhausted(room_policies)  # nothing more of theirs this window
            if room > normal and claimed and claimed[0].batch.policy_id not in room_policies:
                # The claim sized for a paced policy's window picked another policy's batch (the paced
                # one is finished, or not first in turn): keep what the pacer wanted, no more.
                surplus, claimed = claimed[max(normal, 0) :], claimed[: max(normal, 0)]
                await self._put_back(surplus, None)
            bodies = self._runner.prefetch(claimed[0].batch, [c.idx for c in claimed]) if claimed else {}
            for item in claimed:
                self._items[(item.batch_id, item.idx)] = item
                self._ready.add(item, bodies.get(item.idx))
        self._start_ready()
        if not claimed:
            return self._pause(self._idle.next())
        self._idle.reset()
        return PauseFor(0.0)

    def _pause(self, seconds: float) -> PauseFor:
        """Pause ``seconds``, but not past the end of a pacing hold: a held policy's window opens
        then, and its items are claimed at once, not at the next poll."""
        ends_in = self._holds.next_end()
        return PauseFor(seconds if ends_in is None else min(seconds, ends_in))

    def _start_ready(self) -> None:
        may_start = self._may_start
        while len(self._tasks) < self._size and not self._stopping:
            entry = self._ready.pop(may_start)
            if entry is None:
                break
            item, body = entry
            key = (item.batch_id, item.idx)
            policy_id = item.batch.policy_id
            on_the_way = self._preparing.get(policy_id, 0)
            self._preparing[policy_id] = on_the_way + 1
            self._unadmitted[key] = policy_id
            self._executing.add(key)
            task = asyncio.create_task(self._run(item, body), name=f"batch-item-{item.batch_id}-{item.idx}")
            self._tasks[key] = task
            task.add_done_callback(self._on_done(key))
        if self._metrics is not None:
            self._metrics.busy(len(self._tasks))

    def _prepared(self, key: _Key) -> None:
        """An item taken from ready is admitted, held back, put back or ended (called again by its
        task's end: a task cancelled before it ran never reached its own call)."""
        policy_id = self._unadmitted.pop(key, None)
        if policy_id is None:
            return
        if self._preparing.get(policy_id, 0) > 1:
            self._preparing[policy_id] -= 1
        else:
            self._preparing.pop(policy_id, None)

    def _may_start(self, policy_id: str) -> bool:
        """A policy admitted in blocks starts its next item only while its block covers it (else the
        item on its way asks for the next block and the others wait for it: one ask, not one each)."""
        return self._runner.admissions.covers(policy_id, self._preparing.get(policy_id, 0))

    def _on_done(self, key: _Key) -> Callable[[asyncio.Task[None]], None]:
        return lambda _task: self._done(key)

    def _done(self, key: _Key) -> None:
        self._prepared(key)
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
        policy_id = item.batch.policy_id
        prepared: Prepared | None = None
        try:
            try:
                if self._holds.is_held(policy_id):  # held since it was claimed: not tried now
                    await self._put_back([item, *self._ready.drop_policy(policy_id)], None)
                    return
                # The items of its policy in hand, itself included: admitted together if they can be.
                demand = self._ready.of_policy(policy_id) + self._preparing.get(policy_id, 1)
                try:
                    prepared = await self._runner.prepare(item, body, demand)
                except ItemHeld as held:
                    await self._held(item, held)
                    return
            finally:
                self._prepared(key)
                if self._ready:  # a block it asked for may let the policy's next items start
                    self._start_ready()
            self._waiting.admitted(key, item.batch.policy_id)
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
        minimum = 0.0 if held.exact else MIN_HOLD_S
        seconds = self._holds.hold(held.policy_id, held.retry_after, held.meter, minimum)
        if held.share is not None:
            self._rooms.learn(held.policy_id, held.share)
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
            self._waiting.add(waiting_policy, keys)
        try:
            await self._store.put_back(self._instance_id, keys, events_for=put_back_events)
        except Exception as exc:  # the orphan check puts them back once the database answers
            log_database_failure("putting paced batch items back failed; the orphan check will", exc)

    async def cancel_batch(self, batch_id: str, error: str | None = None) -> int:
        """After ``BatchStore.cancel`` (or an expiry) committed: stop this replica's running items of
        ``batch_id`` (each becomes ``cancelled``, with ``error`` when given, else ``"cancelled"``) and
        forget its reserved ones (the cancel cancelled them, and their start would fail anyway).
        Returns how many were stopped or forgotten."""
        stopped = 0
        self._waiting.forget_batch(batch_id)
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
        await self._claim_held.close()
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
        if self._group is not None:
            await self._group.close()
        self._runner.close()
        try:
            # Whatever the database still says we run: the cancelled items and any orphan.
            held = await self._store.held_by(self._instance_id)
            if held:
                back = await self._store.put_back(self._instance_id, held, events_for=put_back_events)
                log.info("put %d unfinished batch items back", back)
        except Exception:
            log.exception("batch worker shutdown could not put items back; rescue will settle them")
