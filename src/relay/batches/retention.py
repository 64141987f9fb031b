"""The retention sweep (SPEC §17 "Retention"): every replica, within a minute of starting and then every
``RELAY_RETENTION_SWEEP_S`` (3600 s), deletes batches finished more than ``RELAY_BATCH_RETENTION_DAYS``
ago and usage events and captured payloads older than ``RELAY_USAGE_RETENTION_DAYS``; 0 keeps them.

What it does. :class:`RetentionSweeper` is a ``background`` service on one :class:`~relay.background.Loop`.
Its first step only waits :data:`FIRST_SWEEP_AFTER_S` (the start's own work goes first), every later step
is one :meth:`~RetentionSweeper.sweep`: under the cluster-wide sweep lock (``relay.store.retention``:
a replica that finds another sweeping skips this round), the batch sweep hands each finished batch past
the cutoff, oldest first, to the one :class:`~relay.batches.deleter.BatchDeleter`; the usage sweep
deletes events, then captured payloads, :data:`CHUNK_ROWS` per transaction. One log line per sweep
gives the counts; the deleter and this module count them in ``relay_retention_deleted_total``.

What it deliberately does not know. SQL, what deleting a batch involves (the deleter), clocks beyond
"now minus N days" (whole days; a few seconds of skew between replicas do not matter at that scale).

Invariants. At most one sweep at a time across replicas (the lock) and in this process (one loop). A
batch that is not finished is never touched (the deleter's rule). No transaction is longer than one
chunk. A failed sweep is logged by the loop and tried again after a backoff (30 s, doubling up to the
interval); a batch that cannot be deleted is passed over for the rest of that sweep, never retried in
a tight loop.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Final

from relay.background import Backoff, Loop, PauseFor
from relay.batches.deleter import BatchDeleter, BatchNotFinished, Deleted
from relay.batches.service import BatchNotFound
from relay.store import retention as store
from relay.store.engine import Engine
from relay.telemetry.metrics import RetentionMetrics

log = logging.getLogger("relay.retention")
FIRST_SWEEP_AFTER_S: Final = 5.0  # after the start; SPEC §17 asks for the first sweep within 60 s
BATCHES_PER_QUERY: Final = 100  # finished batches listed per query
CHUNK_ROWS: Final = 1_000  # usage events or captured payloads deleted per transaction
RETRY_FIRST_S: Final = 30.0


class RetentionSweeper:
    def __init__(
        self,
        engine: Engine,
        deleter: BatchDeleter,
        metrics: RetentionMetrics,
        *,
        batch_days: int,
        usage_days: int,
        every_s: float,
        first_after_s: float = FIRST_SWEEP_AFTER_S,
    ) -> None:
        self._engine = engine
        self._deleter = deleter
        self._metrics = metrics
        self._batch_days = batch_days
        self._usage_days = usage_days
        self._first_after_s = first_after_s
        self._started = False
        retry = Backoff(min(RETRY_FIRST_S, every_s), every_s)
        self._loop = Loop("retention-sweep", self._step, every_s=every_s, backoff=retry)

    async def start(self) -> None:
        self._started = False
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _step(self) -> PauseFor | None:
        if not self._started:  # the first step only waits: the start's own work goes first
            self._started = True
            return PauseFor(self._first_after_s)
        await self.sweep()
        return None

    async def sweep(self) -> Deleted | None:
        """One sweep of both kinds; what it deleted, or None when another replica was sweeping."""
        async with store.sweep_lock(self._engine) as mine:
            if not mine:
                log.info("retention sweep skipped: another replica is sweeping")
                return None
            now = datetime.now(UTC)
            deleted = Deleted()
            if self._batch_days > 0:
                await self._sweep_batches(now - timedelta(days=self._batch_days), deleted)
            if self._usage_days > 0:
                await self._sweep_usage(now - timedelta(days=self._usage_days), deleted)
        log.info(
            "retention sweep deleted %s (batches finished more than %d days ago, usage older than %d days;"
            " 0 = kept)",
            deleted.describe(),
            self._batch_days,
            self._usage_days,
        )
        return deleted

    async def _sweep_batches(self, cutoff: datetime, deleted: Deleted) -> None:
        passed_over: set[str] = set()  # failed this sweep: listed again (oldest first), not retried
        while True:
            limit = BATCHES_PER_QUERY + len(passed_over)
            listed = await store.finished_before(self._engine, cutoff, limit)
            due = [batch_id for batch_id in listed if batch_id not in passed_over]
            for batch_id in due:
                try:
                    deleted.add(await self._deleter.delete(batch_id))
                except (BatchNotFound, BatchNotFinished):
                    pass  # deleted meanwhile (a DELETE, or another replica's sweep before the lock)
                except Exception as exc:  # the next sweep tries it again; the others go on
                    log.warning(
                        "retention: deleting batch %s failed (%s: %s)", batch_id, type(exc).__name__, exc
                    )
                    passed_over.add(batch_id)
            if not due or len(listed) < limit:
                return

    async def _sweep_usage(self, cutoff: datetime, deleted: Deleted) -> None:
        for what, delete in (
            ("usage_events", store.delete_usage_before),
            ("payloads", store.delete_payloads_before),
        ):
            while True:
                n = await delete(self._engine, cutoff, CHUNK_ROWS)
                setattr(deleted, what, getattr(deleted, what) + n)
                self._metrics.count({what: n})
                if n < CHUNK_ROWS:
                    break
                await asyncio.sleep(0)
