"""This replica's batch liveness (SPEC §10.6): heartbeat, rescue of lost replicas' items, orphan put-back.

What it does. Every ``RELAY_BATCH_HEARTBEAT_S`` it heartbeats this replica's worker row; every second
heartbeat it puts back this replica's orphans (items a claim or start committed although its answer
never arrived, e.g. the connection died at COMMIT: the database says this replica holds them, the
pool knows nothing of them), rescues items left ``running`` by dead replicas (``worker lost: ``),
releases their reservations, forgets workers silent past ``RELAY_BATCH_RESCUE_AFTER_S``, and
refreshes the ``relay_batch_items`` gauge. :meth:`Liveness.register` heartbeats once before the pool
claims anything and :meth:`Liveness.forget` removes the worker row after the pool drained; the loop
itself starts after the pool and stops before it (a drain runs without heartbeats, as a shutdown).

What it deliberately does not know. How items are claimed, run or finished (the worker pool: it only
asks the pool which of the items the database shows as this replica's are orphans) and SQL (the batch
store).

Database outages. A failed heartbeat is retried at the next period. A replica does not rescue on
staleness until its own connection has been healthy for ``3 × heartbeat``: right after an outage every
replica's heartbeat looks stale, and the others need one heartbeat to show they are alive.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from relay.background import Loop
from relay.batches.outage import log_database_failure
from relay.domain.batch_record import CANCELLED_ERROR, BatchRecord, stop_error
from relay.store.batch_queue import BatchStore, RescuedItem
from relay.telemetry.metrics import BatchMetrics
from relay.usage.event import UsageEvent, cancelled_event, item_event

log = logging.getLogger("relay.batches")

Key = tuple[str, int]


class Liveness:
    def __init__(
        self,
        *,
        store: BatchStore,
        instance_id: str,
        orphans: Callable[[], Awaitable[list[Key]]],
        rescue_after_s: float,
        heartbeat_s: float = 5.0,
        metrics: BatchMetrics | None = None,
    ) -> None:
        self._store = store  # its finish hooks run when a rescue finishes a batch
        self._instance_id = instance_id
        self._orphans = orphans  # the pool's answer, under its claim lock
        self._rescue_after_s = rescue_after_s
        self._heartbeat_s = heartbeat_s
        self._stale_after_s = 3 * heartbeat_s
        self._metrics = metrics
        self._db_ok_since: float | None = None  # monotonic time of the first heartbeat after an outage
        self._last_pass = 0.0
        self._beating = Loop(
            "batch-liveness",
            self._beat,
            every_s=heartbeat_s,
            wait_first=True,
            report=lambda _name, exc, _delay: log_database_failure("batch heartbeat failed; retrying", exc),
        )

    async def register(self) -> None:
        """The first heartbeat: the worker row exists before the pool claims anything."""
        await self._store.heartbeat(self._instance_id)
        self._db_ok_since = self._last_pass = time.monotonic()

    async def forget(self) -> None:
        """Remove the worker row, once the pool has drained and put back what it held."""
        try:
            await self._store.forget_worker(self._instance_id)
        except Exception:
            log.exception("batch worker shutdown could not remove its worker row; it expires")

    async def start(self) -> None:
        """Heartbeat (and rescue, put back) every period, from one period after :meth:`register`."""
        await self._beating.start()

    async def stop(self) -> None:
        await self._beating.stop()

    async def _beat(self) -> None:
        try:
            await self._store.heartbeat(self._instance_id)
        except Exception:
            self._db_ok_since = None
            raise
        now = time.monotonic()
        if self._db_ok_since is None:
            self._db_ok_since = now
            log.info("batch heartbeat is back; rescue waits %g s for other replicas", self._stale_after_s)
        try:
            if now - self._last_pass >= 2 * self._heartbeat_s:
                self._last_pass = now
                await self._put_back_orphans()
                if now - self._db_ok_since >= self._stale_after_s:
                    await self._rescue()
            if self._metrics is not None:
                for state, count in (await self._store.open_counts()).items():
                    self._metrics.open.labels(state).set(count)
        except Exception as exc:  # not a heartbeat failure: the next heartbeat's pass tries again
            log_database_failure("batch rescue pass failed; retrying", exc)

    async def _rescue(self) -> None:
        rescued = await self._store.rescue(
            by=self._instance_id,
            stale_after_s=self._stale_after_s,
            rescue_after_s=self._rescue_after_s,
            events_for=lambda items: [
                item_event(r.batch, r.idx, error_kind="worker_lost", error_message=r.error) for r in items
            ],
        )
        released = await self._store.release_lost_reservations(
            by=self._instance_id, stale_after_s=self._stale_after_s
        )
        if released:
            log.info("released %d batch items reserved by lost replicas", released)
        if rescued:
            _log_taken_over(rescued)
            if self._metrics is not None:
                self._metrics.finished.labels("discarded").inc(len(rescued))
        if await self._store.expire_workers(self._rescue_after_s):
            log.info("forgot batch workers silent for more than %g s", self._rescue_after_s)

    async def _put_back_orphans(self) -> None:
        """Items the database says this replica runs or reserved but no task of it does. They go back
        to ``available`` (or ``cancelled``), unreserved."""
        orphans = await self._orphans()
        if orphans:
            back = await self._store.put_back(self._instance_id, orphans, events_for=put_back_events)
            # Usually 0: a claim whose answer was lost is rare, and an item finishing while we looked
            # is not an orphan. Only putting something back is worth a warning.
            level = logging.WARNING if back else logging.DEBUG
            log.log(level, "put back %d orphaned batch items (of %d)", back, len(orphans))


def _log_taken_over(rescued: list[RescuedItem]) -> None:
    """One WARNING line per batch and lost replica whose running items this replica took over (SPEC
    §10.6: discarded with ``worker lost: …``), so on-call sees which batches a dead replica touched."""
    groups: dict[tuple[str, str], list[RescuedItem]] = {}
    for item in rescued:
        groups.setdefault((item.batch_id, item.claimed_by), []).append(item)
    for (batch_id, lost), items in groups.items():
        log.warning(
            "batch %s: took over %d running items of lost replica %s (discarded: worker lost)",
            batch_id,
            len(items),
            lost,
            extra={
                "event": "batch_taken_over",
                "batch_id": batch_id,
                "lost_replica": lost,
                "items": len(items),
                "project_id": items[0].batch.project_id,
            },
        )


def put_back_events(pairs: list[tuple[BatchRecord, int]]) -> list[UsageEvent]:
    """The events of items put back into a batch cancelled or expired meanwhile (``stop_error``)."""
    events = []
    for record, idx in pairs:
        error = stop_error(record)
        if error == CANCELLED_ERROR:
            events.append(cancelled_event(record, idx))
        else:
            events.append(item_event(record, idx, error_kind="expired", error_message=error))
    return events
