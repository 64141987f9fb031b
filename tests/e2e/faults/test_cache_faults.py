"""SPEC §19 "A cache that does not answer is skipped (a miss), never an error", through ``relay serve``
on a private Redis that is frozen (SIGSTOP: connections open, nothing answered): every request under a
cached policy is still answered 200 from the upstream, the failures are counted in
``relay_cache_errors_total`` and logged once, and once Redis is back the cache hits again."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, metric_value, start_gateway
from tests.fixtures.private_redis import PrivateRedis
from tests.integration.cache.helpers import cached_scenario

REDIS_TIMEOUT_S = 1.0


@pytest.fixture
def cached_relay(
    tmp_path: Path, fake_upstream: FakeUpstream, live_reaper: Reaper
) -> Iterator[tuple[Gateway, PrivateRedis]]:
    redis = PrivateRedis()
    env = {"RELAY_REDIS_URL": redis.url, "RELAY_REDIS_TIMEOUT_S": str(REDIS_TIMEOUT_S)}
    try:
        for gateway in start_gateway("sqlite", tmp_path, fake_upstream, live_reaper, env):
            yield gateway, redis
    finally:
        redis.close()


def ask(gateway: Gateway, key: str, model: str, prompt: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    response = gateway.post("/v1/chat/completions", body, key=key)
    assert response.status_code == 200, response.text
    return response.headers["x-relay-cache"]


def test_a_cache_that_does_not_answer_is_a_miss_never_an_error(
    cached_relay: tuple[Gateway, PrivateRedis],
) -> None:
    gateway, redis = cached_relay
    s = cached_scenario(gateway)
    prompt = uuid.uuid4().hex
    assert [ask(gateway, s.key, s.model, prompt) for _ in range(2)] == ["miss", "hit"]
    errors_before = metric_value(gateway.metrics(), "relay_cache_errors_total")

    redis.freeze()  # connections stay open, nothing is answered
    try:
        frozen = [ask(gateway, s.key, s.model, prompt) for _ in range(5)]
    finally:
        redis.thaw()
    assert frozen == ["miss"] * 5  # answered from the upstream, never an error
    assert metric_value(gateway.metrics(), "relay_cache_errors_total") > errors_before
    warnings = [r for r in gateway.log_records() if "response cache is skipped" in str(r.get("message"))]
    assert len(warnings) == 1, warnings  # logged once, counted every time

    deadline = time.monotonic() + 20  # the cache is tried again a second after the failure
    while ask(gateway, s.key, s.model, prompt) != "hit":
        assert time.monotonic() < deadline, "the cache never answered again after Redis came back"
        time.sleep(0.2)
