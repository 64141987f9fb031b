"""The one function every request runs through, live or batch: limits → keys → upstream → result.

``Pipeline.run(call)`` reserves the policy's rate limits, asks the key pool for candidates, sends the
request to the plan's host, and fails over to the next key on a tripping status — only before any
byte has been handed to the caller, which is guaranteed here because the decision is taken on the
status line alone. It returns an :class:`Outcome` whose body is either whole (``body``) or a stream
(``chunks``); a stream's usage and the rate-limit commit are settled by ``Outcome.finish()`` once the
stream has ended, whoever consumed it.

What it does not know: who the caller is beyond the principal it is given, HTTP status codes of
Relay's own errors (it raises the error tree), databases, and usage-event storage (callers build the
event from the outcome: live requests through the background writer, batch items in their own
transaction).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relay.adapters import StreamTap, Usage, build_upstream_request, usage_from_response
from relay.errors import RelayError, Unavailable
from relay.pricing import binding_cost
from relay.request.auth import Principal
from relay.request.fallbacks import Fallbacks, Route, is_trigger
from relay.request.keypool import MAX_ATTEMPTS, Failure, KeyPool, classify
from relay.request.ratelimit import RateLimiter
from relay.request.reservations import BlockGrant, Reservation
from relay.request.routing import Plan
from relay.request.spans import attempt_attributes, read_answer, span_name, usage_attributes
from relay.snapshot import Host, HostKey, Policy
from relay.telemetry.metrics import Metrics
from relay.upstream import Upstream, UpstreamConnectionError, UpstreamResponse, UpstreamTimeout

if TYPE_CHECKING:
    from relay.telemetry.tracing_export import AttemptSpan, RequestTrace

_CONNECTION_FAILED = Failure("connection", 0, None)


class UpstreamUnavailable(RelayError):
    """Every key tried failed (SPEC §6); carries what the usage event records."""

    status = 502
    code = "upstream_unavailable"

    def __init__(self, message: str, *, last_status: int, attempts: int) -> None:
        super().__init__(message)
        self.last_status = last_status
        self.attempts = attempts


@dataclass(slots=True)
class Call:
    principal: Principal
    plan: Plan
    shape: str  # the wire shape sent upstream (= the binding's adapter for same-shape calls)
    body: dict  # parsed request body (model is rewritten on the way out)
    caller_headers: Mapping[str, str]
    stream: bool
    # Upstream attempts started so far: the pipeline counts them as it goes, so a caller that cancels
    # the call (a batch item's timeout) can still record how many were made.
    attempts: int = 0
    # SPEC §4 step 5: the requested model's fallbacks (None: none). ``primary_error`` is set when the
    # requested model could not be routed and ``plan`` is already a fallback; ``fallback_from`` names
    # the requested model once ``plan`` is a fallback (the pipeline moves ``plan``/``shape``/``body``).
    fallbacks: Fallbacks | None = None
    primary_error: RelayError | None = None
    fallback_from: str | None = None
    # SPEC §18: the request's span when it is traced (then each upstream attempt is a child span and
    # carries a traceparent naming it); None, the common case, costs one test per attempt.
    trace: RequestTrace | None = None

    @classmethod
    def routed(
        cls,
        principal: Principal,
        route: Route,
        caller_headers: Mapping[str, str],
        *,
        stream: bool,
        trace: RequestTrace | None = None,
    ) -> Call:
        """The call of a routed request (:func:`relay.request.fallbacks.route`): the one way live
        requests and batch items build theirs, so both carry the same fallback state."""
        return cls(
            principal,
            route.plan,
            route.shape,
            route.body,
            caller_headers,
            stream,
            fallbacks=route.fallbacks,
            primary_error=route.primary_error,
            fallback_from=route.fallback_from,
            trace=trace,
        )


@dataclass(slots=True)
class Outcome:
    status: int
    content_type: str
    body: bytes | None
    chunks: AsyncIterator[bytes] | None
    attempts: int
    host_key_id: str | None
    usage: Usage = field(default_factory=Usage)
    ttft_ms: int | None = None
    upstream_ms: int = 0
    error_kind: str | None = None  # "upstream_status" when the upstream answered non-2xx
    _settle: object = None
    fallback_from: str | None = None  # the requested model, when a fallback answered (SPEC §4)
    cache_hit: bool = False  # answered from the response cache: no upstream, no key, cost 0 (SPEC §19)

    async def finish(self) -> Usage:
        """Settle a stream (usage from the tap, rate-limit commit); idempotent; a no-op for bodies."""
        settle = self._settle
        self._settle = None
        if settle is not None:
            await settle()  # type: ignore[operator]
        return self.usage


def _cost(reservation: Reservation, plan: Plan, usage: Usage) -> int | None:
    """The call's priced cost in nano-USD, computed only when a budget will count it (SPEC §5, §8)."""
    if not reservation.needs_cost or not (usage.input_tokens or usage.output_tokens):
        return None
    return binding_cost(plan.binding.pricing, plan.binding.prices, usage)


class Pipeline:
    def __init__(
        self, upstream: Upstream, limiter: RateLimiter, pool: KeyPool, metrics: Metrics | None = None
    ) -> None:
        self._upstream = upstream
        self._limiter = limiter
        self._pool = pool
        self._metrics = metrics

    async def _failed(self, key: HostKey, failure: Failure, seen: int, host: Host, status: str) -> None:
        """Record a failed attempt on the key's breaker (under the host's tuning) and in the metrics."""
        record = await self._pool.failed(key, failure, seen, host)
        metrics = self._metrics
        if metrics is not None:
            metrics.upstream_errors.labels(host.name, key.name, status).inc()
            metrics.breaker_trips.labels(key.id, key.name, failure.kind).inc()
            if record is not None:
                metrics.breaker_open.labels(key.id, key.name).set(1)

    async def run(self, call: Call, reservation: Reservation | None = None) -> Outcome:
        """Run the call. ``reservation``: the call's admission made beforehand (a batch item's
        :meth:`admit_batch`), which this run then owns and commits; ``None`` (live requests): reserve
        here."""
        if reservation is None:
            principal = call.principal
            reservation = await self._limiter.reserve(
                principal.policy,
                principal.credential_id,
                project_id=principal.project_id,
                team_id=principal.team_id,
            )
        try:
            outcome = await self._plans(call, reservation)
        except BaseException:
            await self._limiter.commit(reservation, Usage())
            raise
        if outcome.chunks is None:
            cost = _cost(reservation, call.plan, outcome.usage)
            await self._limiter.commit(reservation, outcome.usage, cost)
        return outcome

    async def admit_batch(self, principal: Principal) -> Reservation:
        """A batch item's admission (SPEC §17): its policy's batch share and ``max_concurrency`` lease
        (``RateLimiter.reserve_batch``), taken before the item starts; pass it to :meth:`run`, or to
        :meth:`release` when the item does not run after all."""
        return await self._limiter.reserve_batch(
            principal.policy,
            principal.credential_id,
            project_id=principal.project_id,
            team_id=principal.team_id,
        )

    async def admit_batch_block(self, policy: Policy, n: int, min_left_s: float = 0.0) -> BlockGrant | None:
        """Up to ``n`` batch items of ``policy`` admitted at once (``RateLimiter.reserve_batch_block``;
        ``None``: admit them one by one with :meth:`admit_batch`). Each runs with an empty reservation."""
        return await self._limiter.reserve_batch_block(policy, n, min_left_s=min_left_s)

    async def admit_hit(self, principal: Principal, *, batch: bool = False) -> Reservation:
        """A response-cache hit's admission (SPEC §19): counted by the policy's ``requests`` and
        ``concurrency`` rules only (a batch item's: at its batch share); :meth:`release` it once the
        hit is answered. Raises ``RateLimited`` like any admission."""
        return await self._limiter.reserve(
            principal.policy,
            principal.credential_id,
            project_id=principal.project_id,
            team_id=principal.team_id,
            batch=batch,
            hit=True,
        )

    async def release(self, reservation: Reservation) -> None:
        """Give back an admission :meth:`run` never used (nothing was sent)."""
        await self._limiter.commit(reservation, Usage())

    async def keys_reopen_in(self, plan: Plan) -> float:
        """Seconds until some key of the plan's host may be tried (0: one may be now), for a batch
        item that waits out open breakers instead of failing ``no healthy keys`` (SPEC §17)."""
        return await self._pool.reopens_in(plan.keys)

    async def _plans(self, call: Call, reservation: Reservation) -> Outcome:
        """The fallback loop (SPEC §4 step 5): try the call's plan; on a trigger error — which is only
        ever raised before any byte reached the caller — move to the next usable fallback. Exhausted:
        the primary's error. One reservation covers every plan: a request is counted once."""
        error = call.primary_error
        reason = error.code if error is not None else ""
        while True:
            if call.fallback_from is not None and self._metrics is not None:
                self._metrics.fallbacks.labels(call.fallback_from, call.plan.model.name, reason).inc()
            try:
                outcome = await self._attempts(call, reservation)
            except RelayError as exc:
                if call.fallbacks is None or not is_trigger(exc):
                    raise
                error = error or exc
                reason = exc.code
                candidate = call.fallbacks.next()
                if candidate is None:
                    raise error from None
                call.plan, call.shape, call.body = candidate.plan, candidate.shape, candidate.body
                call.fallback_from = call.fallbacks.requested_name
                continue
            outcome.fallback_from = call.fallback_from
            return outcome

    async def _attempts(self, call: Call, reservation: Reservation) -> Outcome:
        plan = call.plan
        selection = await self._pool.select(call.principal.policy, plan.keys, plan.host.name)
        last_status = 0
        tried = 0  # keys of this plan: failover is capped per plan (SPEC §6), not per request
        attempts = call.attempts  # cumulative over the plans of a request that fell back
        started = time.perf_counter()
        half_open = selection.half_open  # usually empty: then no probe claim, nothing to remember
        for key in selection.keys:
            if tried >= MAX_ATTEMPTS:
                break
            seen = 0
            if half_open and key.id in half_open:
                if not await self._pool.begin(key, selection):
                    continue  # another request is this opening's probe
                seen = half_open[key.id]
            tried += 1
            attempts += 1
            call.attempts = attempts
            request = build_upstream_request(
                call.shape,
                call.body,
                upstream_model=plan.upstream_model,
                api_key=key.value or "",
                caller_headers=call.caller_headers,
                stream=call.stream,
            )
            trace = call.trace
            span = None
            if trace is not None:
                span, request.headers["traceparent"] = trace.attempt(
                    span_name(call), attempt_attributes(call, trace, key, attempts)
                )
                if trace.tracestate is not None:
                    request.headers["tracestate"] = trace.tracestate
            try:
                response = await self._upstream.post(
                    plan.host.base_url + request.path, request.headers, request.body
                )
            except (UpstreamConnectionError, UpstreamTimeout) as exc:
                status = "timeout" if isinstance(exc, UpstreamTimeout) else "connection"
                if span is not None:
                    trace.end_attempt(span, {}, status)  # type: ignore[union-attr]
                await self._failed(key, _CONNECTION_FAILED, seen, plan.host, status)
                last_status = 0
                continue
            except BaseException:  # cancelled (an item's timeout, a client gone): free a won probe
                if span is not None:
                    trace.end_attempt(span, {}, "cancelled")  # type: ignore[union-attr]
                if seen:
                    await self._pool.release(key, seen)
                raise
            failure = classify(response.status, response.headers.get("retry-after"))
            if failure is not None:
                response.discard()
                if span is not None:
                    trace.end_attempt(  # type: ignore[union-attr]
                        span, {"http.response.status_code": response.status}, str(response.status)
                    )
                await self._failed(key, failure, seen, plan.host, str(response.status))
                last_status = response.status
                continue
            await self._pool.succeeded(key, call.principal.policy, seen, plan.host)
            if self._metrics is not None:
                self._metrics.breaker_open.labels(key.id, key.name).set(0)
                if response.status >= 400:  # an error the caller gets as it is (400, 404, 422 …)
                    self._metrics.upstream_errors.labels(plan.host.name, key.name, str(response.status)).inc()
            return await self._answer(
                call, response, attempts, key.id, reservation, started, request.strip_usage_chunk, span
            )
        if tried == 0:  # every eligible key was half-open with its probe already in flight
            raise Unavailable(f'no healthy keys for host "{plan.host.name}"', code="no_healthy_keys")
        raise UpstreamUnavailable(
            f'all keys of host "{plan.host.name}" failed; last status {last_status}',
            last_status=last_status,
            attempts=attempts,
        )

    async def _answer(
        self,
        call: Call,
        response: UpstreamResponse,
        attempts: int,
        key_id: str,
        reservation: Reservation,
        started: float,
        strip_usage_chunk: bool,
        span: AttemptSpan | None = None,
    ) -> Outcome:
        content_type = response.headers.get("content-type", "application/json")
        error_kind = None if 200 <= response.status < 300 else "upstream_status"
        streaming = call.stream and response.status == 200 and content_type.startswith("text/event-stream")
        if not streaming:
            if span is not None:
                return await self._traced_whole(call, response, attempts, key_id, started, span)
            body = await response.read()
            usage = usage_from_response(call.shape, body) if error_kind is None else Usage()
            elapsed = int((time.perf_counter() - started) * 1000)
            return Outcome(
                response.status, content_type, body, None, attempts, key_id, usage, None, elapsed, error_kind
            )
        tap = StreamTap(call.shape, strip_usage_chunk=strip_usage_chunk, traced=span is not None)
        outcome = Outcome(response.status, content_type, None, None, attempts, key_id)

        async def relay_chunks() -> AsyncIterator[bytes]:
            first = True
            failed: str | None = "cancelled"
            try:
                async for chunk in response.chunks():
                    out = tap.feed(chunk)
                    if first:
                        outcome.ttft_ms = int((time.perf_counter() - started) * 1000)
                        first = False
                    if out:
                        yield out
                tail = tap.finish()
                if tail:
                    yield tail
                failed = None
            except RelayError as exc:
                failed = exc.code
                raise
            finally:
                outcome.upstream_ms = int((time.perf_counter() - started) * 1000)
                await outcome.finish()
                if span is not None and call.trace is not None:
                    attributes: dict[str, Any] = {"http.response.status_code": response.status}
                    tap.answer_attributes(attributes)
                    call.trace.end_attempt(span, usage_attributes(attributes, tap.usage), failed)

        async def settle() -> None:
            outcome.usage = tap.usage
            await self._limiter.commit(reservation, tap.usage, _cost(reservation, call.plan, tap.usage))

        outcome.chunks = relay_chunks()
        outcome._settle = settle
        return outcome

    @staticmethod
    async def _traced_whole(
        call: Call, response: UpstreamResponse, attempts: int, key_id: str, started: float, span: AttemptSpan
    ) -> Outcome:
        """A whole answer of a traced attempt: read once for the usage and the span's answer fields."""
        trace = call.trace
        assert trace is not None
        status = response.status
        attributes: dict[str, Any] = {"http.response.status_code": status}
        try:
            body = await response.read()
        except RelayError as exc:
            trace.end_attempt(span, attributes, exc.code)
            raise
        ok = 200 <= status < 300
        usage = read_answer(call.shape, body, attributes) if ok else Usage()
        trace.end_attempt(
            span, usage_attributes(attributes, usage) if ok else attributes, None if ok else str(status)
        )
        elapsed = int((time.perf_counter() - started) * 1000)
        content_type = response.headers.get("content-type", "application/json")
        error_kind = None if ok else "upstream_status"
        return Outcome(status, content_type, body, None, attempts, key_id, usage, None, elapsed, error_kind)
