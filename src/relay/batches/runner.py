"""One batch item, from its input file to its final state (SPEC §10.4, §10.6).

What it does. :meth:`ItemRunner.prepare` takes one claimed item through the checks of §10.6 in their
order — load input → credential still valid (against the CURRENT snapshot) → recorded policy exists and
is enabled → routing → shape check, then admission at the policy's batch share (SPEC §17) — before the
item starts; :meth:`ItemRunner.run` then sends it through the same glue as a live request: the one
routing step (``request.fallbacks.route``), the one ``Call`` builder (``Call.routed``),
``Pipeline.run`` (never a copy of routing, limits or key selection) and the one usage-event builder
(``usage.event``), unstreamed and bounded by ``RELAY_BATCH_ITEM_TIMEOUT_S`` (counted from ``run``, one
timer for all items: ``relay.batches.deadlines``). :meth:`ItemRunner.release` gives back an unused
admission. Under a policy with a response cache (SPEC §19) an item is looked up before its admission: a
hit is admitted by the requests and concurrency rules only and completes with the stored body, no
upstream call; a miss keeps its completed body. Under ``pacing: "wait"`` an item without room (a spent
share, ``max_concurrency``, every key of its host open) raises :class:`ItemHeld` and the worker pool
puts it back. It answers an :class:`ItemResult`: the final state, the error text of §10.4 and the
item's one usage event, which the worker pool's finalizer writes (state and event in one transaction).

What it deliberately does not know. Claiming, concurrency, cancellation and shutdown (the worker pool
decides when an item runs or stops), HTTP, and payload logging: batch bodies are never captured
(SPEC §9); where a completed item's body lives is the batch's payload store's business.

Invariants. Every result carries exactly one batch usage event with the batch's recorded attribution;
``error_message`` is the item's error text and never a body; ``cost_nanos`` is set only when an
upstream 2xx answer was priced.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from relay.batches.admissions import BlockAdmissions
from relay.batches.deadlines import ItemDeadlines
from relay.batches.holds import OPEN_KEYS, ItemHeld
from relay.batches.item_checks import Discard, parse_item, principal_of, route_item
from relay.batches.item_result import ItemResult, response_lost
from relay.batches.item_shapes import in_item_shape, upstream_returned
from relay.batches.item_trace import start as start_item_trace
from relay.batches.item_trace import traced
from relay.domain.batch_record import CANCELLED_ERROR, BatchRecord
from relay.errors import RateLimited, RelayError
from relay.payloads.base import KeptResponse, PayloadStores, Prefetched
from relay.request.auth import Principal
from relay.request.cache.step import HIT, CacheStep, Entry, Lookup
from relay.request.guardrails.step import BLOCKED, Asked, GuardrailStep, check_body
from relay.request.keypool import PROBE_RECHECK_S
from relay.request.pipeline import Call, Outcome, Pipeline, UpstreamUnavailable
from relay.request.reservations import BatchRefused, Reservation
from relay.request.routing import Plan
from relay.snapshot import Snapshot
from relay.store.batch_queue import ClaimedItem
from relay.store.engine import Connection
from relay.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import Tracer
from relay.usage.event import cancelled_event, item_event

log = logging.getLogger("relay.batches")


@dataclass(slots=True)
class Prepared:
    """An item after :meth:`ItemRunner.prepare`: ready to run (``call`` and its ``reservation``) or
    already decided (``result``, a discard)."""

    item: ClaimedItem
    started: float  # perf_counter at prepare: the item's latency counts from here
    plan: Plan | None = None
    model: str = ""
    call: Call | None = None
    reservation: Reservation | None = None  # held until run hands it to the pipeline or release
    result: ItemResult | None = None
    cache: Lookup | None = None  # where its answer is kept under a policy's cache (SPEC §19)
    hit: Entry | None = None  # the cached answer it gets instead of an upstream call
    answer: bytes | None = None  # a completed item's body in its shape (what a miss keeps)
    guardrails: list[dict[str, str]] = field(default_factory=list)  # SPEC §20: what blocked or redacted

    def elapsed_ms(self) -> int:
        return int((time.perf_counter() - self.started) * 1000)


class ItemRunner:
    def __init__(
        self,
        *,
        payloads: PayloadStores,
        pipeline: Pipeline,
        snapshot: Callable[[], Snapshot],
        instance_id: str,
        item_timeout_s: float,
        translate_max_tokens: int = 4096,
        metrics: Metrics | None = None,
        cache: CacheStep | None = None,
        tracer: Tracer | None = None,
        guardrails: GuardrailStep | None = None,
    ) -> None:
        self._cache = cache  # the live plane's response cache: items use their policy's like requests
        self._tracer = tracer  # SPEC §18: items of a traced, sampled create are traces of their own
        self._guardrails = guardrails  # SPEC §20: the live plane's step; items pass their policy's
        self._payloads = payloads
        self._pipeline = pipeline
        self._snapshot = snapshot
        self._instance_id = instance_id
        self._timed_out = f"timeout: item ran longer than RELAY_BATCH_ITEM_TIMEOUT_S ({item_timeout_s:g} s)"
        self._deadlines = ItemDeadlines(item_timeout_s)  # every item's budget, one timer for all
        self._max_tokens = translate_max_tokens  # RELAY_TRANSLATE_DEFAULT_MAX_TOKENS (SPEC §17 translate)
        self._metrics = metrics  # the live plane's families: upstream latency, tokens, cost (SPEC §12)
        self._admissions = BlockAdmissions(pipeline)
        self._principal: tuple[BatchRecord | None, Principal | None] = (None, None)  # the last one built

    @property
    def admissions(self) -> BlockAdmissions:
        """The batch admissions granted in blocks (the worker pool spreads their starts)."""
        return self._admissions

    def prefetch(self, batch: BatchRecord, idxs: Sequence[int]) -> Prefetched:
        """Start reading these claimed items' request bodies ahead, if the batch's store does that
        (one query per claim instead of one per started group); pass each to :meth:`execute`."""
        return self._payloads.of(batch.payload_store).prefetch_requests(batch.id, idxs)

    async def execute(
        self, item: ClaimedItem, prefetched: asyncio.Future[bytes | None] | None = None
    ) -> ItemResult:
        """:meth:`prepare` then :meth:`run` (an item that starts whatever its admission says)."""
        return await self.run(await self.prepare(item, prefetched))

    async def prepare(
        self, item: ClaimedItem, prefetched: asyncio.Future[bytes | None] | None = None, demand: int = 1
    ) -> Prepared:
        """Everything before the upstream call, in §10.6's order: load input, credential, policy,
        routing, shape, then admission (``Pipeline.admit_batch``: the batch share, SPEC §17). A failing
        check becomes the prepared item's discard. Under ``pacing: "wait"`` an item that finds no room
        raises :class:`ItemHeld` instead (nothing taken); so does one whose host has every key open.
        ``prefetched``: its request body read ahead (:meth:`prefetch`), ``None`` in it if not. The
        item's timeout does not run here: it starts in :meth:`run`. ``demand``: how many items of the
        same policy the caller has in hand, this one included: admitted together when the policy's
        plan allows (:mod:`relay.batches.admissions`)."""
        batch, idx = item.batch, item.idx
        prepared = Prepared(item, time.perf_counter())
        try:
            raw = await self._load(batch, idx, prefetched)
            snap = self._snapshot()
            last_batch, known = self._principal
            principal = principal_of(batch, snap, known if last_batch is batch else None)
            self._principal = (batch, principal)
            body = parse_item(raw)
            requested = body.get("model")
            prepared.model = requested if isinstance(requested, str) else ""
            if principal.policy.input_guardrails:  # before the cache and routing, as a live request
                await self._guard(prepared, "input", principal, body)
            chosen = route_item(principal, body, snap, batch.inbound_shape, self._max_tokens)
            prepared.plan = chosen.requested_plan
            waits = principal.policy.batch.pacing == "wait"
            if waits and chosen.fallbacks is None:
                reopens_in = await self._pipeline.keys_reopen_in(chosen.plan)
                if reopens_in > 0:
                    raise ItemHeld(batch.policy_id, reopens_in, OPEN_KEYS)
            if self._cache is not None and principal.policy.cache is not None:
                shape = batch.inbound_shape
                prepared.cache, prepared.hit = await self._cache.for_item(principal, shape, body)
            try:
                prepared.reservation = await (
                    self._pipeline.admit_hit(principal, batch=True)  # SPEC §19: requests, concurrency only
                    if prepared.hit is not None
                    else self._admissions.admit(principal, demand if waits else 1)
                )
            except BatchRefused as exc:
                if waits:
                    held = ItemHeld(batch.policy_id, exc.retry_after, exc.meter, exc.share, exc.exact)
                    raise held from None
                raise Discard(exc.code, exc.message) from None
            except RateLimited as exc:  # a spent budget: never paced
                raise Discard(exc.code, exc.message) from None
            prepared.call = Call.routed(principal, chosen, {}, stream=False)
        except Discard as failure:
            prepared.result = self._discarded(prepared, failure)
        return prepared

    async def run(self, prepared: Prepared) -> ItemResult:
        """Run a prepared item, bounded by ``RELAY_BATCH_ITEM_TIMEOUT_S`` from now; never raises for a
        failing item (it becomes ``discarded``) but :class:`ItemHeld` (every key turned out open or
        probing, under ``pacing: "wait"``). Cancellation (``asyncio.CancelledError``) propagates to the
        worker pool, which decides what it means. Traced: :func:`relay.batches.item_trace.start`."""
        trace = start_item_trace(self._tracer, prepared.item, prepared.call)
        if trace is None:
            return await self._run(prepared)
        return await traced(trace, self._run(prepared), ItemHeld)

    async def _run(self, prepared: Prepared) -> ItemResult:
        if prepared.result is not None:
            return prepared.result
        if prepared.hit is not None:
            return await self._from_cache(prepared, prepared.hit)
        call, reservation = prepared.call, prepared.reservation
        assert call is not None and reservation is not None
        prepared.reservation = None  # the pipeline owns it now: it commits it on every outcome
        try:
            deadline = self._deadlines.enter()
            try:
                outcome = await self._pipeline.run(call, reservation)
                prepared.plan = call.plan  # the plan that answered: a fallback's, after one
            except asyncio.CancelledError:
                if not self._deadlines.leave(deadline):
                    raise  # a cancel or a shutdown, not the item's budget: the worker pool's business
                raise Discard("timeout", self._timed_out, attempts=call.attempts) from None
            except TimeoutError:
                if not deadline.expired:
                    raise  # not the item's budget: a bug somewhere below, reported as such
                raise Discard("timeout", self._timed_out, attempts=call.attempts) from None
            except UpstreamUnavailable as exc:
                raise Discard(exc.code, exc.message, status=exc.last_status, attempts=exc.attempts) from None
            except RelayError as exc:  # no_healthy_keys and the rest of the pipeline's refusals
                if exc.code == "no_healthy_keys" and call.principal.policy.batch.pacing == "wait":
                    raise ItemHeld(prepared.item.batch.policy_id, PROBE_RECHECK_S, OPEN_KEYS) from None
                raise Discard(exc.code, exc.message) from None
            finally:
                self._deadlines.leave(deadline)  # a no-op after the CancelledError branch's
        except Discard as failure:
            return self._discarded(prepared, failure)
        result = await self._answered(prepared, outcome)
        if prepared.cache is not None and self._cache is not None:
            await self._cache.missed(prepared.cache, prepared.answer, outcome.usage)
        return result

    async def _from_cache(self, prepared: Prepared, entry: Entry) -> ItemResult:
        """A completed item answered from its policy's cache: no upstream call, the stored body (in
        the item's shape, as a live caller of that shape gets it), a usage event with ``cache_hit``."""
        await self.release(prepared)
        assert self._cache is not None
        self._cache.counted(HIT)
        outcome = Outcome(200, entry.content_type, entry.body, None, 0, None, entry.usage, cache_hit=True)
        return self._completed(prepared, outcome, entry.body)

    async def _guard(self, prepared: Prepared, stage: str, principal: Principal, body: Any) -> None:
        """Run the policy's guardrails of ``stage`` over the item's body (redactions written into it);
        a block discards the item with ``guardrail blocked: <name>`` (SPEC §20, §10.4)."""
        assert self._guardrails is not None
        policy = principal.policy
        guardrails = policy.input_guardrails if stage == "input" else policy.output_guardrails
        asked = Asked(prepared.model, principal.project_id, f"{prepared.item.batch.id}:{prepared.item.idx}")
        verdict = await check_body(self._guardrails, stage, guardrails, body, asked)
        prepared.guardrails.extend(verdict.applied)
        if verdict.blocked is not None:
            status = 0 if stage == "input" else 200
            raise Discard(BLOCKED, f"guardrail blocked: {verdict.blocked.name}", status=status)

    async def release(self, prepared: Prepared) -> None:
        """Give back the admission of a prepared item that will not run (its start failed, a cancel)."""
        reservation, prepared.reservation = prepared.reservation, None
        if reservation is not None:
            await self._pipeline.release(reservation)

    def _discarded(self, prepared: Prepared, failure: Discard) -> ItemResult:
        event = item_event(
            prepared.item.batch,
            prepared.item.idx,
            status=failure.status,
            error_kind=failure.kind,
            error_message=failure.message,
            plan=prepared.plan,
            model=prepared.model,
            latency_ms=prepared.elapsed_ms(),
            attempts=failure.attempts,
            guardrails=prepared.guardrails,
        )
        return ItemResult("discarded", failure.status or None, failure.message, event)

    async def _answered(self, prepared: Prepared, outcome: Outcome) -> ItemResult:
        batch, idx, plan = prepared.item.batch, prepared.item.idx, prepared.plan
        if self._metrics is not None and plan is not None:
            self._metrics.upstream_latency.labels(plan.host.name, "batch").observe(outcome.upstream_ms / 1000)
        if outcome.error_kind is not None or not 200 <= outcome.status < 300:
            message = upstream_returned(outcome.status, outcome.body)
            event = item_event(
                batch,
                idx,
                status=outcome.status,
                error_kind=outcome.error_kind or "upstream_status",
                error_message=message,
                plan=plan,
                outcome=outcome,
                latency_ms=prepared.elapsed_ms(),
            )
            return ItemResult("discarded", outcome.status, message, event)
        assert prepared.call is not None  # an answered item ran its call
        principal = prepared.call.principal
        answer = in_item_shape(batch.inbound_shape, principal, plan, outcome, prepared.model)
        if answer is None:  # a translated 2xx the binding's adapter cannot read
            message = f"upstream returned {outcome.status}: the answer could not be translated"
            event = item_event(
                batch,
                idx,
                status=outcome.status,
                error_kind="upstream_unreadable",
                error_message=message,
                plan=plan,
                outcome=outcome,
                latency_ms=prepared.elapsed_ms(),
            )
            return ItemResult("discarded", outcome.status, message, event)
        if principal.policy.output_guardrails:
            try:
                answer = await self._guard_answer(prepared, principal, answer)
            except Discard as blocked:  # the upstream answered: priced, never completed (SPEC §20)
                outcome.error_kind = BLOCKED
                event = item_event(
                    batch,
                    idx,
                    status=outcome.status,
                    error_kind=BLOCKED,
                    error_message=blocked.message,
                    plan=plan,
                    outcome=outcome,
                    latency_ms=prepared.elapsed_ms(),
                    guardrails=prepared.guardrails,
                )
                return ItemResult("discarded", outcome.status, blocked.message, event)
        prepared.answer = answer
        return self._completed(prepared, outcome, answer)

    async def _guard_answer(self, prepared: Prepared, principal: Principal, answer: bytes) -> bytes:
        try:
            parsed = orjson.loads(answer)
        except orjson.JSONDecodeError:
            return answer
        before = len(prepared.guardrails)
        await self._guard(prepared, "output", principal, parsed)
        return orjson.dumps(parsed) if len(prepared.guardrails) > before else answer

    def _completed(self, prepared: Prepared, outcome: Outcome, answer: bytes) -> ItemResult:
        batch, idx = prepared.item.batch, prepared.item.idx
        plan, status, latency_ms = prepared.plan, outcome.status, prepared.elapsed_ms()
        event = item_event(
            batch,
            idx,
            status=status,
            plan=plan,
            outcome=outcome,
            latency_ms=latency_ms,
            guardrails=prepared.guardrails,
        )
        if self._metrics is not None and not outcome.cache_hit:
            self._metrics.used(event)
        completed = ItemResult("completed", outcome.status, None, event, None, batch.payload_store)
        try:
            completed.response = self._payloads.of(batch.payload_store).keep_response(batch.id, idx, answer)
        except OSError as exc:  # e.g. its batch's directory was removed meanwhile (a §15 delete)
            return response_lost(completed, exc)
        return completed

    async def flush_responses(self) -> None:
        """Put the response bodies kept so far on disk (before their items' rows commit)."""
        await self._payloads.flush()

    async def save_responses(self, conn: Connection, items: list[tuple[str, str, int, KeptResponse]]) -> None:
        """Inside the transaction completing these ``(store, batch_id, idx, kept)`` items."""
        await self._payloads.save_responses(conn, items)

    def close(self) -> None:
        self._payloads.close()

    def cancelled(self, item: ClaimedItem, error: str | None = None) -> ItemResult:
        """An item stopped while it ran: by a cancel, or (``error`` ``expired: …``) by an expiry."""
        if error is None:
            return ItemResult("cancelled", None, CANCELLED_ERROR, cancelled_event(item.batch, item.idx))
        event = item_event(item.batch, item.idx, error_kind="expired", error_message=error)
        return ItemResult("cancelled", None, error, event)

    def failed(self, item: ClaimedItem, exc: BaseException) -> ItemResult:
        """An unexpected error inside Relay (a bug or an outage): the item is discarded, not left running."""
        message = f"internal error: {type(exc).__name__}"
        event = item_event(item.batch, item.idx, error_kind="internal", error_message=message)
        return ItemResult("discarded", None, message, event)

    async def _load(
        self, batch: BatchRecord, idx: int, prefetched: asyncio.Future[bytes | None] | None
    ) -> bytes:
        if prefetched is not None:
            body = await asyncio.shield(prefetched)
            if body is not None:
                return body
        try:
            return await self._payloads.of(batch.payload_store).read_request(batch.id, idx)
        except FileNotFoundError:
            if batch.payload_store != "files":
                raise Discard(
                    "load_input", f"load input: the request of item {idx} is not in the database"
                ) from None
            raise Discard(
                "load_input",
                f"load input: the request file of item {idx} is not in RELAY_BATCH_PAYLOAD_DIR on replica "
                f"{self._instance_id} (is the directory shared by every replica?)",
            ) from None
