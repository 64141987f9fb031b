"""The background writer of live usage events (SPEC §8): a bounded queue off the response path.

What it does. :class:`UsageWriter` takes live events (``relay.usage.event``) off the response path into
a bounded in-memory queue and writes them in batches (one transaction and one executemany per batch,
payload captures beside their events), with its metrics and a rate-limited report of what was lost.
Batch items' events are written by the batch queue, in the transaction that finalizes the item (§10.8).

What it deliberately does not know. SQL (``relay.store.usage_flush`` writes a flush), HTTP, how an
event is built, and payload policy (``relay.usage.capture`` decides what is captured; this module only
carries the record).

Invariants. ``record`` never blocks, never awaits and never raises: when the queue is full the event
is dropped, ``relay_usage_events_dropped_total{reason="queue_full"}`` counts it and a warning says so
(at most one line per 10 s, with the count) — never silently. A database outage keeps events queued and
retries with backoff; only a full queue, a row the database refuses outright, or a shutdown that outlasts
its timeout loses events, and each of those is counted and logged. Nothing here logs a body, a
credential or SQL parameters.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.background import DONE, Backoff, Loop, PauseFor
from relay.store.usage_flush import write_flush
from relay.store.write_errors import describe_error, refused
from relay.usage.capture import PayloadRecord
from relay.usage.event import UsageEvent

log = logging.getLogger("relay.usage")

REPORT_INTERVAL_S: Final = 10.0
_DROP_LABELS: Final = {
    "queue_full": "events dropped (queue full)",
    "refused": "events refused by the database",
    "shutdown": "events not written before the stop timeout",
    "stopped": "events recorded after stop",
}


class _DropReport:
    """Counts losses by reason and logs them at most once per interval (the first one at once)."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._last = -interval
        self._pending: dict[str, int] = {}

    def add(self, reason: str, count: int = 1) -> None:
        self._pending[reason] = self._pending.get(reason, 0) + count
        self.report_due()

    def report_due(self) -> None:
        if self._pending and time.monotonic() - self._last >= self._interval:
            self.report()

    def due_in(self) -> float:
        """Seconds until a pending report is due (``inf`` when nothing is pending)."""
        if not self._pending:
            return math.inf
        return max(0.0, self._last + self._interval - time.monotonic())

    def report(self) -> None:
        if not self._pending:
            return
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(self._pending.items()))
        log.warning("usage data lost since the last report: %s", parts, extra={"lost": dict(self._pending)})
        self._pending.clear()
        self._last = time.monotonic()


_Item = tuple[UsageEvent, PayloadRecord | None]


class UsageWriter:
    """Queues live usage events (and payload captures) and writes them in batches, off the response path.

    One task drains the queue: it waits up to ``flush_interval_s`` for events to accumulate (or less,
    once ``batch_size`` are waiting), then writes the oldest ``batch_size`` in one transaction. With
    nothing queued it sleeps until the next event arrives, then waits ``flush_interval_s`` for the
    events behind it: an idle relay does not wake 20 times a second to find nothing. Payload
    bodies have their own memory budget (``payload_budget_bytes``): past it a capture is dropped and
    counted, its event kept. Call ``record`` from the event loop's thread.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        registry: CollectorRegistry,
        *,
        queue_size: int = 10_000,
        batch_size: int = 500,
        flush_interval_s: float = 0.05,
        payload_budget_bytes: int = 128 * 1024 * 1024,
        stop_timeout_s: float = 10.0,
        retry_initial_s: float = 0.1,
        retry_max_s: float = 5.0,
    ) -> None:
        self._engine = engine
        self._queue_size = queue_size
        self._batch_size = batch_size
        self._payload_budget = payload_budget_bytes
        self._stop_timeout = stop_timeout_s
        self._queue: deque[_Item] = deque()
        self._payload_bytes = 0
        self._closed = False
        self._failing = False  # the last write failed: a full batch waits for the backoff, not at once
        self._flush_interval = flush_interval_s
        self._quiet = False  # the last pass found nothing queued: the next event wakes the drain task
        self._gather = False  # woken by the first event after a quiet spell: wait for the ones behind it
        self._connection: AsyncConnection | None = None
        self._drain = Loop(
            "relay-usage-writer",
            self._write_pass,
            every_s=flush_interval_s,
            wait_first=True,
            backoff=Backoff(retry_initial_s, retry_max_s),
            report=self._write_failed,
        )
        self._report = _DropReport(REPORT_INTERVAL_S)
        self._failure_logged = -REPORT_INTERVAL_S
        r = registry
        self._written = Counter("relay_usage_events_written", "Usage events stored", registry=r)
        self._transactions = Counter("relay_usage_write_transactions", "Usage write commits", registry=r)
        self._write_errors = Counter("relay_usage_write_errors", "Failed usage writes (retried)", registry=r)
        reasons = "queue_full, refused (by the database), shutdown (stop timed out), stopped"
        self._dropped = Counter(
            "relay_usage_events_dropped", f"Usage events lost: {reasons}", ["reason"], registry=r
        )
        kept = "Payload captures dropped, their events kept: budget, refused, shutdown"
        self._payloads_dropped = Counter("relay_usage_payloads_dropped", kept, ["reason"], registry=r)
        depth = Gauge("relay_usage_queue_depth", "Usage events waiting to be written", registry=r)
        depth.set_function(lambda: len(self._queue))

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def record(self, event: UsageEvent, payload: PayloadRecord | None = None) -> None:
        """Queue one event (and its captured bodies); returns at once and never raises."""
        try:
            if self._closed:
                self._drop("stopped", 1)
                return
            if len(self._queue) >= self._queue_size:
                self._drop("queue_full", 1)
                return
            if payload is not None:
                if self._payload_bytes + payload.size > self._payload_budget:
                    self._payloads_dropped.labels("budget").inc()
                    self._report.add("payloads dropped (over the memory budget)")
                    payload = None
                else:
                    self._payload_bytes += payload.size
            self._queue.append((event, payload))
            if self._quiet:
                self._quiet, self._gather = False, True
                self._drain.wake()
            elif len(self._queue) >= self._batch_size and not self._failing:
                self._drain.wake()
        except Exception:  # pragma: no cover - defensive: recording must never fail a request
            log.exception("usage event could not be queued")

    async def start(self) -> None:
        await self._drain.start()

    async def stop(self) -> None:
        """Write everything queued, for at most ``stop_timeout_s``; whatever is left then is counted
        and logged as lost (reason ``shutdown``). Later ``record`` calls are counted as ``stopped``."""
        self._closed = True
        self._drain.launch()  # never started: drain anyway
        self._drain.wake()
        if not await self._drain.finished(self._stop_timeout):
            await self._drain.stop()
            lost = len(self._queue)
            payloads = sum(1 for _, p in self._queue if p is not None)
            self._queue.clear()
            self._payload_bytes = 0
            if lost:
                self._drop("shutdown", lost)
                self._payloads_dropped.labels("shutdown").inc(payloads)
        await self._let_go(invalidate=False)
        self._report.report()

    # -- the drain task --------------------------------------------------------------------------------

    async def _write_pass(self) -> object:
        """Write what is queued: full batches, then (unless stopping) leave a partial one for the next
        interval. A failure (the database is down or restarting) keeps the events queued; the loop
        retries after its backoff, or at once when stopping begins."""
        if self._closed and not self._queue:
            return DONE
        self._report.report_due()
        if not self._queue:
            self._quiet = True  # ``record`` wakes the task; a pending loss report is still logged on time
            return PauseFor(self._report.due_in())
        if self._gather and not self._closed:
            self._gather = False
            return PauseFor(self._flush_interval)  # cut short by a full batch, like every interval
        self._gather = False
        while self._queue:
            await self._write_head()
            if len(self._queue) < self._batch_size and not self._closed:
                break  # what arrived meanwhile waits for the next interval (or a full batch)
        self._failing = False
        if self._closed and not self._queue:
            return DONE
        if self._closed or len(self._queue) >= self._batch_size:
            self._drain.wake()
        return None

    def _write_failed(self, _name: str, exc: BaseException, delay: float) -> None:
        self._failing = True
        self._write_errors.inc()
        self._log_failure(exc, delay)

    def _head(self) -> list[_Item]:
        """The oldest events, up to ``batch_size`` and about 16 MiB of payload bodies."""
        batch: list[_Item] = []
        size = 0
        for item in itertools.islice(self._queue, self._batch_size):
            if batch and item[1] is not None and size + item[1].size > 16 * 1024 * 1024:
                break
            batch.append(item)
            size += item[1].size if item[1] is not None else 0
        return batch

    async def _write_head(self) -> None:
        batch = self._head()
        try:
            await self._insert(batch)
        except Exception as exc:
            if not refused(exc):
                raise
            await self._write_one_by_one(batch)  # isolate the row(s) the database refuses
            return
        self._consume(len(batch))
        self._written.inc(len(batch))

    async def _insert(self, items: list[_Item]) -> None:
        events = [event for event, _ in items]
        payloads = [payload for _, payload in items if payload is not None]
        conn = self._connection or await self._keep_connection()
        try:
            await write_flush(conn, events, payloads)
        except Exception as exc:
            if not refused(exc):  # an outage: the next attempt starts on a new connection
                await self._let_go(invalidate=True)
            raise
        self._transactions.inc()

    async def _keep_connection(self) -> AsyncConnection:
        """The connection flushes are written on, kept between them: a checkout per flush (and its
        reset on return) cost more CPU than a small flush's rows (``relay.store.usage_flush``)."""
        conn = await self._engine.connect()
        self._connection = conn
        return conn

    async def _let_go(self, *, invalidate: bool) -> None:
        conn, self._connection = self._connection, None
        if conn is None:
            return
        try:
            if invalidate:
                await conn.invalidate()
            await conn.close()
        except Exception as exc:  # a broken connection's close: nothing left to save
            log.debug("usage writer connection close failed: %s", describe_error(exc))

    async def _write_one_by_one(self, batch: list[_Item]) -> None:
        # Each item leaves the queue as soon as it is settled, so an outage half-way through (which
        # propagates) never writes an item twice. A refused payload is retried without its payload.
        for event, payload in batch:
            if not await self._try_insert(event, payload):
                if payload is not None and await self._try_insert(event, None):
                    self._payloads_dropped.labels("refused").inc()
                    self._report.add("payloads refused by the database")
                else:
                    self._drop("refused", 1)
            self._consume(1)

    async def _try_insert(self, event: UsageEvent, payload: PayloadRecord | None) -> bool:
        """True when written, False when the database refused the rows; an outage propagates."""
        try:
            await self._insert([(event, payload)])
        except Exception as exc:
            if not refused(exc):
                raise
            with_payload = " with its payload" if payload is not None else ""
            log.warning("database refused usage event %s%s (%s)", event.id, with_payload, describe_error(exc))
            return False
        self._written.inc()
        return True

    def _consume(self, count: int) -> None:
        for _ in range(count):
            _, payload = self._queue.popleft()
            if payload is not None:
                self._payload_bytes -= payload.size

    def _drop(self, reason: str, count: int) -> None:
        self._dropped.labels(reason).inc(count)
        self._report.add(_DROP_LABELS[reason], count)

    def _log_failure(self, exc: BaseException, delay: float) -> None:
        now = time.monotonic()
        if now - self._failure_logged >= REPORT_INTERVAL_S:
            self._failure_logged = now
            log.warning(
                "usage events cannot be written yet (%s); %d queued, retrying in %.1f s",
                describe_error(exc),
                len(self._queue),
                delay,
            )
