"""This replica's webhook deliverer (SPEC §10.10): claim due events, POST them signed, record each attempt.

What it does. One task polls the outbox (every ``poll_s``, at once again while claims come back full)
and claims up to its free slots of due events (``store.webhooks.claim_due``: SKIP LOCKED on Postgres).
Each claimed event is attempted in its own task: its webhook's secret is opened, the exact stored body
is POSTed with the Standard Webhooks headers (``relay.webhooks.signing``; the event id as
``webhook-id`` on every attempt, the attempt's own timestamp), and the whole attempt — connect, send,
response head — is bounded by ``timeout_s`` (10 s by default), so a hanging receiver holds one slot for
at most that long. 2xx is delivered; anything else, a timeout or a connection error retries on
``RetrySchedule`` until 24 h have passed, then the event is failed. Every replica runs one, whatever
its ``RELAY_BATCH_WORKERS``. Every few seconds the loop also refreshes the queue-depth gauges (enabled
webhooks' events only), and every ``expiry_every_s`` it fails every pending event older than the
window plus one claim lease, whatever its webhook's ``enabled`` says (``store.webhooks.fail_expired``):
a disabled webhook's events are never claimed, so the attempt-time rule would never fail them. The
lease's grace lets an enabled webhook's last attempt, due at the window's end, be made first.

What it deliberately does not know. Batches (events are opaque bodies), SQL (``store.webhooks``), how
events come to exist (``relay.webhooks.outbox``).

Invariants. All state is in the database, so a restart loses nothing: a claim lasts ``timeout_s`` + a
margin, and an attempt whose replica died (or stopped before it ended) is due again when that lease
runs out — at least once, never lost. An attempt is recorded only by the claim that made it (its
``claim_token``), so each attempt is recorded once. The request carries the stored body and the
signature headers only: no credential of Relay's, no batch item body; the response body is not read.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.background import DONE, Backoff, Loop
from relay.crypto.sealing import SecretBox
from relay.domain.ids import mint_id
from relay.store import webhooks as store
from relay.store.engine import is_transient
from relay.telemetry.metrics import WebhookMetrics
from relay.upstream import Upstream, UpstreamConnectionError, UpstreamTimeout
from relay.webhooks.schedule import RetrySchedule
from relay.webhooks.signing import signed_headers

log = logging.getLogger("relay.webhooks")

LEASE_MARGIN_S = 5.0  # a claim outlives the longest attempt by this much
STATS_EVERY_S = 5.0
#: The expiry pass runs every window / EXPIRY_PASSES_PER_WINDOW, within these bounds (60 s at 24 h).
EXPIRY_PASSES_PER_WINDOW = 24
EXPIRY_EVERY_BOUNDS_S = (1.0, 60.0)
CLAIM_BACKOFF_MAX_S = 5.0  # a failing claim is retried after 2 × poll_s, doubling up to this
RECORD_BACKOFF_FIRST_S, RECORD_BACKOFF_MAX_S = 0.2, 2.0  # recording an attempt while the database is away


class Deliverer:
    def __init__(
        self,
        *,
        engine: AsyncEngine,
        box: SecretBox,
        client: Upstream,
        instance_id: str,
        schedule: RetrySchedule,
        slots: int = 8,
        timeout_s: float = 10.0,
        poll_s: float = 0.5,
        metrics: WebhookMetrics | None = None,
        grace_s: float = 10.0,
    ) -> None:
        self._engine = engine
        self._box = box
        self._client = client
        self._instance_id = instance_id
        self._schedule = schedule
        self._slots = slots
        self._timeout_s = timeout_s
        self._metrics = metrics
        self._lease_s = timeout_s + LEASE_MARGIN_S
        low, high = EXPIRY_EVERY_BOUNDS_S
        self._expiry_every_s = min(high, max(low, schedule.window_s / EXPIRY_PASSES_PER_WINDOW))
        self._grace_s = grace_s
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._last_stats = self._last_expiry = 0.0
        self._claims = Loop(
            "webhook-deliverer",
            self._claim_pass,
            every_s=poll_s,
            backoff=Backoff(min(2 * poll_s, CLAIM_BACKOFF_MAX_S), CLAIM_BACKOFF_MAX_S),
            report=_report_claim_failure,
        )

    async def start(self) -> None:
        self._stopping = False
        await self._claims.start()

    async def stop(self) -> None:
        """Stop claiming (a claim in flight ends first, for up to the attempt timeout); let attempts
        in flight end for up to ``grace_s``; cancel the rest (their claims lapse, and any replica
        attempts them again after the lease)."""
        self._stopping = True
        self._claims.wake()
        await self._claims.finished(self._timeout_s)
        await self._claims.stop()
        running = list(self._running)
        if running:
            _, pending = await asyncio.wait(running, timeout=self._grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # ---------------------------------------------------------------------------------------- claim

    async def _claim_pass(self) -> object:
        """Claim up to the free slots' worth of due events and start their attempts; now and then
        fail the expired ones and refresh the gauges. Woken at once by a slot that frees while all
        were busy; again at once when a claim came back full and a slot is still free."""
        if self._stopping:
            return DONE
        free = self._slots - len(self._running)
        full = False
        if free > 0:
            token = secrets.token_hex(16)
            claimed = await store.claim_due(
                self._engine, self._instance_id, token, limit=free, lease_s=self._lease_s
            )
            for event in claimed:
                task = asyncio.create_task(self._attempt(event), name=f"webhook-{event.id}")
                self._running.add(task)
                task.add_done_callback(self._done)
            full = len(claimed) == free
        if time.monotonic() - self._last_expiry >= self._expiry_every_s:
            self._last_expiry = time.monotonic()
            await self._fail_expired()
        if self._metrics is not None and time.monotonic() - self._last_stats >= STATS_EVERY_S:
            self._last_stats = time.monotonic()
            await self._refresh_gauges(self._metrics)
        if full:
            await asyncio.sleep(0)  # more may be due: claim again once a slot frees
            if len(self._running) < self._slots:
                self._claims.wake()
        return None

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if len(self._running) == self._slots - 1:
            self._claims.wake()  # a slot freed while every slot was busy: there may be more due

    async def _fail_expired(self) -> None:
        failed = await store.fail_expired(self._engine, self._schedule.window_s + self._lease_s)
        if failed:
            log.warning("%d webhook events marked failed: still pending past the retry window", failed)

    async def _refresh_gauges(self, metrics: WebhookMetrics) -> None:
        pending, oldest = await store.pending_summary(self._engine)
        metrics.pending.set(pending)
        age = (datetime.now(UTC) - oldest).total_seconds() if oldest is not None else 0.0
        metrics.oldest_pending.set(max(age, 0.0))

    # ---------------------------------------------------------------------------------------- attempt

    async def _attempt(self, event: store.ClaimedEvent) -> None:
        number = event.attempts + 1
        status, error, latency_ms = await self._post(event)
        delivered = status is not None and 200 <= status < 300
        if delivered:
            state, retry_in = "delivered", None
        else:
            age_s = (datetime.now(UTC) - event.created_at).total_seconds()
            retry_in = self._schedule.retry_in(number, age_s)
            state = "pending" if retry_in is not None else "failed"
        attempt = store.Attempt(
            delivery_id=mint_id("whd"),
            status_code=status,
            latency_ms=latency_ms,
            error=error,
            state=state,
            retry_in_s=retry_in,
        )
        if not await self._record(event, attempt):
            return
        if self._metrics is not None:
            self._metrics.deliveries.labels("retrying" if state == "pending" else state).inc()
        if state == "failed":
            log.warning("webhook event %s failed for good after %d attempts: %s", event.id, number, error)

    async def _post(self, event: store.ClaimedEvent) -> tuple[int | None, str | None, int]:
        """(status or None, error or None, latency ms) of one POST, bounded by the timeout."""
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            secret = self._box.open(event.secret_encrypted, bound_to=event.webhook_id)
        except ValueError:
            return None, "the webhook's secret does not open with this replica's master key", 0
        body = event.body.encode()
        headers = signed_headers(secret, event.id, int(time.time()), body)
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.post(event.url, headers, body)
                status = response.status
                response.discard()  # the receiver's body is not read: its status is the answer
        except (TimeoutError, UpstreamTimeout):
            error = f"timeout: no answer within {self._timeout_s:g} s"
        except UpstreamConnectionError as exc:
            error = "connection failed: " + exc.message.removeprefix("upstream connection failed: ")
        except Exception as exc:  # e.g. a URL the client refuses: recorded, retried like any failure
            error = f"request failed: {type(exc).__name__}"
        latency_ms = int((time.monotonic() - started) * 1000)
        if status is not None and not 200 <= status < 300:
            error = f"receiver answered {status}"
        return status, error, latency_ms

    async def _record(self, event: store.ClaimedEvent, attempt: store.Attempt) -> bool:
        """Write the attempt; a database outage is retried for a while (if it lasts, the claim lapses
        and the event is attempted again: at least once)."""
        backoff = Backoff(RECORD_BACKOFF_FIRST_S, RECORD_BACKOFF_MAX_S)
        for _ in range(8):
            try:
                recorded = await store.finish_attempt(self._engine, event, attempt)
            except Exception as exc:
                if not is_transient(exc):
                    log.exception("recording webhook attempt of %s failed", event.id)
                    return False
                await asyncio.sleep(backoff.next())
                continue
            if not recorded:
                log.info(
                    "webhook event %s: attempt not recorded (its claim lapsed or it was deleted)", event.id
                )
            return recorded
        log.warning("webhook event %s: attempt not recorded (database unreachable)", event.id)
        return False


def _report_claim_failure(_name: str, exc: BaseException, _delay: float) -> None:
    if is_transient(exc):
        log.warning("webhook claim failed; retrying: %s", type(exc).__name__)
    else:
        log.error("webhook claim failed; retrying", exc_info=exc)
