"""Prometheus metrics (SPEC §12), created once per process on the registry ``boot`` owns.

Label sets are small and bounded (route, shape, status, the catalog's model, host and host-key names
and ids), so cardinality stays proportional to the catalog, never to traffic: a model label is the
catalog model a request was routed to, never the name a caller sent. Recording costs a dict lookup and
an add: the live plane's families are wrapped in :class:`Children`, which keeps each labelled child
once it exists. No counter exports a ``_created`` series (boot switches them off with
:func:`no_created_series` before building the registry).
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


class Children(Generic[_Metric]):
    """A metric family whose ``labels(...)`` children are kept in a dict by their label values.

    prometheus_client's own ``labels()`` validates the values and takes a lock on every call (≈ 2 µs),
    and the live path calls it four times per request. Its children are never removed here, and the
    label values are bounded by the catalog and the route table, so the dict stays as small as the
    family itself.
    """

    __slots__ = ("_children", "family")

    def __init__(self, family: _Metric) -> None:
        self.family: _Metric = family
        self._children: dict[tuple[str, ...], _Metric] = {}

    def labels(self, *values: str) -> _Metric:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.family.labels(*values)
        return child


_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
)
#: A batch item runs from its claim to its answer: seconds to minutes (RELAY_BATCH_ITEM_TIMEOUT_S).
_ITEM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1)


class Metered(Protocol):
    """What :meth:`Metrics.used` reads of a usage event (``relay.usage.event.UsageEvent``; telemetry sits
    below usage, so it names the fields, not the class)."""

    @property
    def model(self) -> str: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cached_input_tokens(self) -> int: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def cost_nanos(self) -> int | None: ...


def no_created_series() -> None:
    """Stop every counter and histogram exporting a ``_created`` series (the time it was created): a
    series per labelled child that dashboards never chart. prometheus_client keeps this switch per
    process; boot sets it once, before any metric exists."""
    disable_created_metrics()


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Children(
            Counter(
                "relay_requests_total",
                "Inference requests by route, shape, status and the catalog model they were routed to "
                '("" before routing)',
                ["route", "shape", "status", "model"],
                registry=registry,
            )
        )
        self.upstream_latency = Children(
            Histogram(
                "relay_upstream_latency_seconds",
                "Time from sending upstream to the response head (or whole body), live requests and "
                "batch items (source)",
                ["host", "source"],
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            )
        )
        self.tokens = Children(
            Counter(
                "relay_tokens_total",
                "Tokens the upstreams reported, live and batch, by catalog model and kind (input, output, "
                "cached_input and reasoning: parts of input and output)",
                ["model", "kind"],
                registry=registry,
            )
        )
        self.cost = Children(
            Counter(
                "relay_cost_usd_total",
                "Priced cost in USD of the tokens above (bindings with prices only), by catalog model",
                ["model"],
                registry=registry,
            )
        )
        self.overhead = Children(
            Histogram(
                "relay_gateway_overhead_seconds",
                "Time Relay adds to a request beyond the upstream call",
                ["shape"],
                buckets=_OVERHEAD_BUCKETS,
                registry=registry,
            )
        )
        self.rate_limited = Children(
            Counter(
                "relay_rate_limit_rejections_total",
                "Requests refused by a policy rate limit",
                ["policy"],
                registry=registry,
            )
        )
        self.budget_refused = Children(
            Counter(
                "relay_budget_rejections_total",
                "Requests refused because a policy's spend limit (cost_usd rule) is spent",
                ["policy"],
                registry=registry,
            )
        )
        # Breaker and upstream-error series carry the host key's name beside its id (SPEC §6): the id
        # stays stable across renames, the name is what an on-call reads.
        self.breaker_trips = Children(
            Counter(
                "relay_breaker_trips_total",
                "Upstream failures recorded against a host key (by the breaker's kind of failure)",
                ["host_key", "host_key_name", "kind"],
                registry=registry,
            )
        )
        self.upstream_errors = Children(
            Counter(
                "relay_upstream_errors_total",
                "Upstream attempts that failed, by host, host key name and status (an HTTP status, "
                "or connection / timeout when no answer came), live and batch",
                ["host", "host_key_name", "status"],
                registry=registry,
            )
        )
        self.state_fail_open = Children(
            Counter(
                "relay_state_fail_open_total",
                "Rate-limit steps admitted because shared state did not answer",
                ["step"],
                registry=registry,
            )
        )
        self.fallbacks = Children(
            Counter(
                "relay_fallbacks_total",
                "Requests answered by a fallback model of the policy, by requested model, fallback "
                "and the error that sent them there",
                ["from_model", "to_model", "reason"],
                registry=registry,
            )
        )
        self.breaker_open = Children(
            Gauge(
                "relay_breaker_open",
                "1 while a host key's breaker is open (as last seen by this replica)",
                ["host_key", "host_key_name"],
                registry=registry,
            )
        )
        self.cache_requests = Children(
            Counter(
                "relay_cache_requests_total",
                "Requests under a policy with a response cache, by result: hit (answered from the "
                "cache), miss (sent upstream) or bypass (Cache-Control, or a stream under streams: false)",
                ["result"],
                registry=registry,
            )
        )
        self.cache_errors = Children(
            Counter(
                "relay_cache_errors_total",
                "Response cache lookups, stores and purges the store did not answer (a lookup is then a "
                "miss), by operation",
                ["op"],
                registry=registry,
            )
        )
        self.access_log_dropped = Counter(
            "relay_access_log_dropped_total",
            "Access log lines (one per request at info) dropped instead of written: the queue was full "
            "or the log stream refused the write",
            registry=registry,
        )
        self.guardrail_actions = Children(
            Counter(
                "relay_guardrail_actions_total",
                "Guardrail matches acted on, by guardrail and action (block or redact)",
                ["guardrail", "action"],
                registry=registry,
            )
        )
        self.guardrail_webhook_failures = Children(
            Counter(
                "relay_guardrail_webhook_failures_total",
                "Guardrail webhooks that timed out, answered non-2xx or answered something unreadable "
                "(the guardrail's fail mode then decided)",
                ["guardrail"],
                registry=registry,
            )
        )
        # Always registered (0 while tracing is off), so a dashboard's query exists on every replica.
        self.otel_spans_dropped = Counter(
            "relay_otel_spans_dropped_total",
            "Trace spans dropped instead of exported: the collector was down, slow or refused them, "
            "or the export queue was full",
            registry=registry,
        )

    def used(self, event: Metered) -> None:
        """Count one answer's tokens and cost from its usage event (live requests and batch items)."""
        model, tokens = event.model, self.tokens
        if event.input_tokens:
            tokens.labels(model, "input").inc(event.input_tokens)
        if event.output_tokens:
            tokens.labels(model, "output").inc(event.output_tokens)
        if event.cached_input_tokens:
            tokens.labels(model, "cached_input").inc(event.cached_input_tokens)
        if event.reasoning_tokens:
            tokens.labels(model, "reasoning").inc(event.reasoning_tokens)
        if event.cost_nanos:
            self.cost.labels(model).inc(event.cost_nanos / 1e9)


class BatchMetrics:
    """Batch items by state and the worker pool's use (SPEC §12), registered only on replicas that run
    a worker pool. ``open`` (available/running, every replica's items) is read from the database by
    the batch liveness loop (``relay.batches.liveness``); ``finished`` counts the final states this
    replica wrote; ``started`` the items it started per project (SPEC §17's fair share, made visible).
    The families touched per item (finished, started, duration, the worker gauges) keep their children
    in a dict (:class:`Children`), as the live path's do."""

    def __init__(self, registry: CollectorRegistry, size: int) -> None:
        self.finished = Children(
            Counter(
                "relay_batch_items_finished_total",
                "Batch items this replica gave a final state (rescues of lost replicas' items included)",
                ["state"],
                registry=registry,
            )
        )
        self.open = Gauge(
            "relay_batch_items",
            "Batch items waiting (available) or running, in the whole database",
            ["state"],
            registry=registry,
        )
        self.started = Children(
            Counter(
                "relay_batch_items_started_total",
                "Batch items this replica started running, by the submitting project's id (fair share)",
                ["project"],
                registry=registry,
            )
        )
        self.workers = Gauge(
            "relay_batch_workers",
            "This replica's batch worker slots, busy or idle",
            ["state"],
            registry=registry,
        )
        # SPEC §17 pacing: items this replica put back for want of room (per policy id, not run since),
        # and every time an item was held back, by the meter that refused it.
        self.waiting = Gauge(
            "relay_batch_items_waiting",
            "Available batch items of the policy that were tried and found no room (this replica's view)",
            ["policy"],
            registry=registry,
        )
        self.pacing_waits = Counter(
            "relay_batch_pacing_waits_total",
            "Batch items held back by pacing, by policy and the meter that refused them",
            ["policy", "meter"],
            registry=registry,
        )
        self.duration = Children(
            Histogram(
                "relay_batch_item_duration_seconds",
                "How long batch items this replica finished ran (claim to answer: routing, rate-limit "
                "waits, every upstream attempt), by final state (completed, discarded)",
                ["state"],
                buckets=_ITEM_BUCKETS,
                registry=registry,
            )
        )
        self.size = size
        for state in ("completed", "discarded", "cancelled"):
            self.finished.labels(state)
        for state in ("available", "running"):
            self.open.labels(state)
        for state in ("completed", "discarded"):
            self.duration.labels(state)
        self._busy_slots = self.workers.labels("busy")
        self._idle_slots = self.workers.labels("idle")
        self._busy = -1
        self.busy(0)

    def busy(self, running: int) -> None:
        """Called at every slot change, several times per item: the gauges (a lock each) are set only
        when the count moved."""
        if running == self._busy:
            return
        self._busy = running
        self._busy_slots.set(running)
        self._idle_slots.set(max(self.size - running, 0))


class WebhookMetrics:
    """Webhook deliveries (SPEC §10.10, §12), registered on every replica (every replica delivers).
    ``deliveries`` counts this replica's attempts by outcome; the two gauges cover every replica's
    events, read from the database by the deliverer every few seconds."""

    OUTCOMES = ("delivered", "retrying", "failed")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deliveries = Counter(
            "relay_webhook_deliveries_total",
            "Webhook delivery attempts this replica made, by outcome (delivered, retrying: failed and "
            "tried again later, failed: given up after 24 h)",
            ["outcome"],
            registry=registry,
        )
        self.pending = Gauge(
            "relay_webhook_queue_depth",
            "Webhook events of enabled webhooks waiting for delivery (pending), in the whole database",
            registry=registry,
        )
        self.oldest_pending = Gauge(
            "relay_webhook_oldest_pending_seconds",
            "Age of the oldest pending webhook event of an enabled webhook (0 when none)",
            registry=registry,
        )
        for outcome in self.OUTCOMES:
            self.deliveries.labels(outcome)


class RetentionMetrics:
    """What retention deleted (SPEC §17), by ``what``: the sweeps and ``DELETE /api/batches/{id}`` of
    this replica. ``items`` went with their request and response bodies; ``files`` are the §14 output
    and error files of deleted batches; ``payloads`` are captured live payloads (SPEC §9)."""

    WHAT = ("batches", "items", "files", "idempotency_keys", "usage_events", "payloads")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.deleted = Counter(
            "relay_retention_deleted_total",
            "Rows this replica's retention deleted (sweeps and DELETE /api/batches/{id}), by what",
            ["what"],
            registry=registry,
        )
        for what in self.WHAT:
            self.deleted.labels(what)

    def count(self, counts: dict[str, int]) -> None:
        for what, n in counts.items():
            if n:
                self.deleted.labels(what).inc(n)
