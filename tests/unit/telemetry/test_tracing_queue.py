"""A full export queue drops spans, never waits: each one dropped is counted in
``relay_otel_spans_dropped_total`` at once (the SDK only logs it), while the exporter's thread is stuck
on a collector that hangs. A real tracer, a real receiver on loopback (``tests/fixtures/otlp.py``)."""

from __future__ import annotations

import time

import pytest

from relay.telemetry.tracing_export import Tracer
from tests.fixtures.otlp import start_receiver


class _Count:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


def test_a_full_queue_counts_each_span_it_drops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "2")
    receiver = start_receiver()
    receiver.hang()
    dropped = _Count()
    tracer = Tracer(
        endpoint=receiver.endpoint, ratio=1.0, service_name="relay", headers=None, dropped=dropped
    )
    try:
        first = tracer.request("POST /first", {})
        first.finish({}, False)
        deadline = time.monotonic() + 10
        while tracer._processor._queue and time.monotonic() < deadline:  # the thread took it: now stuck
            time.sleep(0.01)
        for n in range(20):
            tracer.request(f"POST /{n}", {}).finish({}, False)
        # 4 fit in the queue, 16 did not (+1 if the stuck export already timed out and failed)
        assert 16 <= dropped.value <= 17
    finally:
        receiver.stop()
        tracer.shutdown()
