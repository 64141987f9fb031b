"""After a live request: its usage event, its payload capture, its metrics and its one log line.

Everything here runs after the caller has its last byte and hands work to the background writer
without awaiting it, so recording never adds latency. A request that never authenticated has no
attribution and gets no usage event (it is still counted and logged); every other request gets
exactly one, including refusals (status 0: the upstream was never reached).
Logs carry ids and numbers only, never a credential or a body.

What it deliberately does not know: how an event's fields are filled and priced (``usage.event.usage_event``,
the builder batch items use too) and how events are written (``usage.writer``).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from relay.errors import RelayError
from relay.request.pipeline import Outcome, UpstreamUnavailable
from relay.snapshot import Snapshot
from relay.telemetry.access_log import AccessLog
from relay.telemetry.metrics import Metrics
from relay.usage.capture import BodyCapture, PayloadRecord, capture_enabled, max_bytes
from relay.usage.event import usage_event
from relay.usage.writer import UsageWriter

if TYPE_CHECKING:
    from relay.inference.live import RequestContext
    from relay.request.auth import Principal
    from relay.telemetry.tracing_export import RequestTrace

log = logging.getLogger("relay.request")


class LiveRecorder:
    def __init__(self, writer: UsageWriter, metrics: Metrics) -> None:
        self._writer = writer
        self._metrics = metrics
        self.access_log = AccessLog(log, on_drop=metrics.access_log_dropped.inc)

    def capture(self, ctx: RequestContext, snap: Snapshot) -> BodyCapture | None:
        """A capture buffer when payload logging applies to this request (SPEC §9), else None."""
        principal = ctx.principal
        if principal is None or not capture_enabled(
            snap.settings, principal.policy.payload_logging, principal.key_payload_logging
        ):
            return None
        return BodyCapture(max_bytes(snap.settings))

    def finished(
        self,
        ctx: RequestContext,
        outcome: Outcome,
        snap: Snapshot,
        *,
        response_body: bytes | None = None,
        stream_capture: BodyCapture | None = None,
        broken: str | None = None,
        blocked: RelayError | None = None,
    ) -> None:
        """``blocked``: a guardrail refused the upstream's answer (SPEC §20) — the event keeps the
        upstream's status, the caller was answered ``blocked.status``."""
        error_kind = "stream_broken" if broken else outcome.error_kind
        message = (
            broken if broken else (f"upstream returned {outcome.status}" if outcome.error_kind else None)
        )
        if blocked is not None:
            message = blocked.message
        payload = None
        if response_body is not None:
            capture = self.capture(ctx, snap)
            if capture is not None:
                capture.add(response_body)
                payload = self._payload(ctx, snap, capture)
        elif stream_capture is not None:
            payload = self._payload(ctx, snap, stream_capture)
        self._emit(
            ctx,
            outcome.status,
            error_kind,
            message,
            outcome,
            payload,
            refused_status=blocked.status if blocked is not None else None,
        )

    def refused(self, ctx: RequestContext, exc: RelayError, snap: Snapshot) -> None:
        status = exc.last_status if isinstance(exc, UpstreamUnavailable) else 0
        attempts = exc.attempts if isinstance(exc, UpstreamUnavailable) else 0
        if ctx.principal is not None:
            if exc.code == "rate_limit_exceeded":
                self._metrics.rate_limited.labels(ctx.principal.policy.name).inc()
            elif exc.code == "budget_exceeded":
                self._metrics.budget_refused.labels(ctx.principal.policy.name).inc()
        self._emit(
            ctx, status, exc.code, exc.message, None, None, refused_status=exc.status, attempts=attempts
        )

    def _payload(self, ctx: RequestContext, snap: Snapshot, response: BodyCapture) -> PayloadRecord:
        request = BodyCapture(max_bytes(snap.settings))
        request.add(ctx.body)
        return PayloadRecord(
            request_id=ctx.request_id,
            ts=datetime.now(UTC),
            request_body=request.body,
            response_body=response.body,
            request_truncated=request.truncated,
            response_truncated=response.truncated,
        )

    def _emit(
        self,
        ctx: RequestContext,
        status: int,
        error_kind: str | None,
        error_message: str | None,
        outcome: Outcome | None,
        payload: PayloadRecord | None,
        *,
        refused_status: int | None = None,
        attempts: int = 0,
    ) -> None:
        latency_ms = int((time.perf_counter() - ctx.started) * 1000)
        answered = refused_status if refused_status is not None else status
        metrics = self._metrics
        plan = ctx.plan
        model = plan.model.name if plan is not None else ""  # the catalog's name: bounded cardinality
        metrics.requests.labels(ctx.path, ctx.inbound_shape, str(answered), model).inc()
        if outcome is not None:
            overhead = max(0.0, latency_ms / 1000 - outcome.upstream_ms / 1000)
            metrics.overhead.labels(ctx.inbound_shape).observe(overhead)
            if plan is not None and not outcome.cache_hit:
                metrics.upstream_latency.labels(plan.host.name, "live").observe(outcome.upstream_ms / 1000)
        principal = ctx.principal
        if principal is not None:
            event = usage_event(
                principal,
                source="live",
                request_id=ctx.request_id,
                inbound_shape=ctx.inbound_shape,
                streamed=ctx.streamed,
                latency_ms=latency_ms,
                status=status,
                error_kind=error_kind,
                error_message=error_message,
                plan=ctx.plan,
                outcome=outcome,
                requested_model=ctx.model,
                attempts=attempts,
                guardrails=ctx.guardrails,
            )
            self._writer.record(event, payload)
            if outcome is not None and not outcome.cache_hit:  # tokens the upstreams reported
                metrics.used(event)
        trace = ctx.trace
        if trace is not None:
            _end_server_span(trace, answered, principal)
        if not self.access_log.enabled():
            return
        fields: dict[str, Any] = {
            "request_id": ctx.request_id,
            "status": answered,
            "latency_ms": latency_ms,
            "model": ctx.model,
        }
        if trace is not None and trace.sampled:
            fields["trace_id"], fields["span_id"] = trace.ids()
        if principal is not None:
            fields.update(
                policy_id=principal.policy.id,
                project_id=principal.project_id,
                team_id=principal.team_id,
                principal_id=principal.principal_id,
                credential_kind=principal.credential_kind,
                credential_id=principal.credential_id,
            )
        if error_kind:
            fields["error"] = error_kind
        self.access_log.write(fields)


def _end_server_span(trace: RequestTrace, status: int, principal: Principal | None) -> None:
    """SPEC §18: the server span's final attributes (ids only, never a credential); ERROR on a 5xx."""
    attributes: dict[str, Any] = {"http.response.status_code": status}
    if principal is not None:
        attributes["relay.project_id"] = principal.project_id
        attributes["relay.policy"] = principal.policy.id
        attributes["relay.credential_kind"] = principal.credential_kind
    trace.finish(attributes, status >= 500)
