"""A host's breaker tuning on the request path (SPEC §6), in-process: ``Pipeline.run`` over a snapshot
whose host carries ``breaker``, in-memory state, the real fake upstream. The threshold keeps a failing
key in the pool until its n-th failure; the opening and the closing are each logged once, naming the
host and the key; the breaker metrics carry the key's name beside its id."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from relay.domain.breaker import BreakerTuning
from relay.request.keypool import Failure
from relay.request.pipeline import Pipeline
from relay.telemetry.metrics import Metrics
from tests.fixtures.fake_upstream import FakeUpstream
from tests.unit.request.conftest import Core, CoreCatalog


def tuned_pool(wired: CoreCatalog, tuning: BreakerTuning) -> str:
    """The wired host with ``tuning``, a policy over a flaky key then a good one; the relay key."""
    wired.build.hosts[wired.host.id] = replace(wired.host, breaker=tuning)
    flaky = wired.build.host_key("flaky", wired.host, "flaky-upstream-key")
    good = wired.build.host_key("steady", wired.host, "ok-steady")
    policy = wired.build.policy("tuned", keys=(flaky, good))
    return wired.build.key("tuned", account=wired.account, policy=policy)[1]


def breaker_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "relay.keypool" and getattr(r, "event", "").startswith("breaker")
    ]


@pytest.fixture
async def metered(core: Core) -> tuple[Core, CollectorRegistry]:
    """``core`` whose pipeline records metrics on a registry of its own."""
    registry = CollectorRegistry()
    core.pipeline = Pipeline(core.pipeline._upstream, core.limiter, core.pool, Metrics(registry))
    return core, registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def test_a_key_stays_in_the_pool_until_its_threshold_th_failure(
    metered: tuple[Core, CollectorRegistry],
    wired: CoreCatalog,
    fake: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
) -> None:
    core, registry = metered
    caplog.set_level(logging.INFO, logger="relay.keypool")
    fake.configure(key_rules=[{"pattern": "flaky-*", "status": 503}])
    key = tuned_pool(wired, BreakerTuning(threshold=3, window_s=60))
    snapshot = wired.snapshot()
    for _ in range(3):  # the flaky key is tried first every time until its third failure opens it
        assert (await core.run(snapshot, key)).attempts == 2
    skipped = await core.run(snapshot, key)
    assert (skipped.attempts, skipped.host_key_id) == (1, "hk_steady")
    assert fake.stats()["by_key"] == {"flaky-upstream-key": 3, "ok-steady": 4}

    [opened] = breaker_lines(caplog)
    assert opened.levelno == logging.WARNING
    assert (opened.event, opened.host, opened.host_key_name, opened.host_key_id) == (  # type: ignore[attr-defined]
        "breaker_opened",
        "core-openai",
        "flaky",
        "hk_flaky",
    )
    assert opened.reason == "upstream_5xx" and 0 < opened.open_for_s <= 1  # type: ignore[attr-defined]
    assert 'key "flaky" of host "core-openai"' in opened.getMessage()
    assert "flaky-upstream-key" not in opened.getMessage()  # never a key value

    labels = {"host_key": "hk_flaky", "host_key_name": "flaky"}
    assert sample(registry, "relay_breaker_open", **labels) == 1
    assert sample(registry, "relay_breaker_trips_total", **labels, kind="server") == 3
    errors = {"host": "core-openai", "host_key_name": "flaky", "status": "503"}
    assert sample(registry, "relay_upstream_errors_total", **errors) == 3

    # The upstream recovers; once the opening's time is up a request probes the key and closes it.
    fake.configure(key_rules=[])

    deadline = time.monotonic() + 15
    while (await core.run(snapshot, key)).host_key_id != "hk_flaky":  # the steady key until half-open
        assert time.monotonic() < deadline, "the half-open probe never closed the key"
        await asyncio.sleep(0.1)
    lines = breaker_lines(caplog)
    assert [line.event for line in lines] == ["breaker_opened", "breaker_closed"]  # type: ignore[attr-defined]
    closed = lines[1]
    assert (closed.levelno, closed.host, closed.host_key_name) == (logging.INFO, "core-openai", "flaky")  # type: ignore[attr-defined]
    assert closed.open_for_s >= 0  # type: ignore[attr-defined]
    assert sample(registry, "relay_breaker_open", **labels) == 0


async def test_max_open_s_caps_the_backoff_the_key_pool_writes(core: Core, wired: CoreCatalog) -> None:
    host = replace(wired.host, breaker=BreakerTuning(max_open_s=3))
    seen, record = 0, None
    for _ in range(5):  # every half-open probe fails: 1, 2, 3, 3, 3 s instead of 1, 2, 4, 8, 16 s
        record = await core.pool.failed(wired.k1, Failure("server", 500, None), seen, host)
        assert record is not None
        seen = record.trip_id
    assert record is not None and record.failures == 5 and record.open_until is not None
    assert record.open_until - time.time() == pytest.approx(3, abs=0.5)


async def test_auth_failures_open_at_once_whatever_the_threshold(
    core: Core, wired: CoreCatalog, fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="relay.keypool")
    fake.configure(key_rules=[{"pattern": "flaky-*", "status": 401}])
    key = tuned_pool(wired, BreakerTuning(threshold=50, window_s=60))
    snapshot = wired.snapshot()
    assert (await core.run(snapshot, key)).attempts == 2
    assert (await core.run(snapshot, key)).attempts == 1  # open after the first 401
    [opened] = breaker_lines(caplog)
    assert opened.reason == "upstream_auth_failed" and opened.open_for_s is None  # type: ignore[attr-defined]
    assert "until the key is edited" in opened.getMessage()


async def test_the_untuned_host_still_opens_on_the_first_failure(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    fake.configure(key_rules=[{"pattern": "flaky-*", "status": 500}])
    key = tuned_pool(wired, wired.host.breaker)
    snapshot = wired.snapshot()
    assert (await core.run(snapshot, key)).attempts == 2
    assert (await core.run(snapshot, key)).attempts == 1
