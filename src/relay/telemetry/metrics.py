"""Prometheus metrics (SPEC §12), created once per process on the registry ``boot`` owns.

Label sets are small and bounded (route, shape, status class, host-key id), so cardinality stays
proportional to the catalog, never to traffic. Recording costs a dict lookup and an add: the live
plane's families are wrapped in :class:`Children`, which keeps each labelled child once it exists.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.1)


class Metrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Children(
            Counter(
                "relay_requests_total",
                "Inference requests by route, shape and status",
                ["route", "shape", "status"],
                registry=registry,
            )
        )
        self.upstream_latency = Children(
            Histogram(
                "relay_upstream_latency_seconds",
                "Time from sending upstream to the response head (or whole body)",
                ["host"],
                buckets=_LATENCY_BUCKETS,
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
        self.breaker_trips = Children(
            Counter(
                "relay_breaker_trips_total",
                "Upstream failures recorded against a host key",
                ["host_key", "kind"],
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
                ["host_key"],
                registry=registry,
            )
        )


class BatchMetrics:
    """Batch items by state and the worker pool's use (SPEC §12), registered only on replicas that run
    a worker pool. ``open`` (available/running, every replica's items) is read from the database by
    the batch liveness loop (``relay.batches.liveness``); ``finished`` counts the final states this
    replica wrote."""

    def __init__(self, registry: CollectorRegistry, size: int) -> None:
        self.finished = Counter(
            "relay_batch_items_finished_total",
            "Batch items this replica gave a final state (rescues of lost replicas' items included)",
            ["state"],
            registry=registry,
        )
        self.open = Gauge(
            "relay_batch_items",
            "Batch items waiting (available) or running, in the whole database",
            ["state"],
            registry=registry,
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
        self.size = size
        for state in ("completed", "discarded", "cancelled"):
            self.finished.labels(state)
        for state in ("available", "running"):
            self.open.labels(state)
        self.busy(0)

    def busy(self, running: int) -> None:
        self.workers.labels("busy").set(running)
        self.workers.labels("idle").set(max(self.size - running, 0))


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
