"""SPEC §5 rate limits of live requests over HTTP: requests, token meters and concurrency, per policy
and per credential, in each caller shape.

The fake upstream records the upstream key and body of every request, so where a request went and
which keys were tried in which order is visible. Key values follow the fake's naming convention
(``fail-500-…`` always answers 500, …; see docs/fake-upstream.md). Breakers, counters and limits are
per host key or policy, so each test builds its own host, keys, model and policy (random names) and
nothing leaks between the tests sharing the package's process (one ``relay serve`` per backend:
SQLite with hot state in process memory; Postgres with hot state in Redis).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    Gateway,
)
from tests.integration.live.helpers import (
    assert_anthropic_error,
    assert_openai_error,
    messages,
)

# --- §5 rate limits ---------------------------------------------------------------------------------


def assert_rate_limited(response: httpx.Response) -> dict[str, Any]:
    error = assert_openai_error(response, 429, "rate_limit_exceeded", "rate_limit_error")
    retry_after = response.headers.get("retry-after")
    assert retry_after is not None and retry_after.isdigit() and int(retry_after) >= 1, response.headers
    return error


def test_requests_limit(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(rules=[{"meter": "requests", "limit": 2, "window": "1d"}])
    assert [gateway.chat(s.model, key=s.key).status_code for _ in range(2)] == [200, 200]
    error = assert_rate_limited(gateway.chat(s.model, key=s.key))
    assert error["message"] == f'rate limit exceeded: policy "{s.policy}" allows 2 requests per 1d'
    assert_rate_limited(gateway.chat(s.model, key=s.key))
    assert fake.stats()["requests"] == 2  # a refused request never reaches the upstream


def test_requests_limit_in_the_anthropic_shape(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(adapter="anthropic", rules=[{"meter": "requests", "limit": 1, "window": "1h"}])
    assert messages(gateway, s.model, s.key).status_code == 200
    refused = messages(gateway, s.model, s.key)
    assert_anthropic_error(refused, 429, "rate_limit_error")
    assert int(refused.headers["retry-after"]) >= 1


def test_per_credential_and_per_policy_limits(gateway: Gateway, fake: FakeUpstream) -> None:
    per_credential = gateway.scenario(
        rules=[{"meter": "requests", "limit": 1, "window": "1d", "per": "credential"}]
    )
    _, second = gateway.mint_key(per_credential.policy)
    first = per_credential.key
    model = per_credential.model
    assert gateway.chat(model, key=first).status_code == 200
    error = assert_rate_limited(gateway.chat(model, key=first))
    assert error["message"].endswith("per credential")
    assert gateway.chat(model, key=second).status_code == 200  # its own counter
    assert_rate_limited(gateway.chat(model, key=second))

    per_policy = gateway.scenario(rules=[{"meter": "requests", "limit": 2, "window": "1d"}])
    _, second = gateway.mint_key(per_policy.policy)
    first, model = per_policy.key, per_policy.model
    assert gateway.chat(model, key=first).status_code == 200
    assert gateway.chat(model, key=second).status_code == 200
    assert_rate_limited(gateway.chat(model, key=first))  # one counter for every key of the policy
    assert_rate_limited(gateway.chat(model, key=second))


@pytest.mark.parametrize(
    ("meter", "stream"), [("tokens", False), ("input_tokens", False), ("output_tokens", True)]
)
def test_token_meters_refuse_once_the_window_is_spent(
    gateway: Gateway, fake: FakeUpstream, meter: str, stream: bool
) -> None:
    """Token meters check what the window has already consumed, then count the real usage after the
    answer (for a stream: once it has ended). 6 input words → 6 input and 7 output tokens."""
    s = gateway.scenario(rules=[{"meter": meter, "limit": 5, "window": "1d"}])
    body = {"model": s.model, "messages": [{"role": "user", "content": "one two three four five six"}]}
    if stream:
        result = gateway.stream("/v1/chat/completions", {**body, "stream": True}, key=s.key)
        assert result.status == 200 and result.events[-1].data == "[DONE]"
    else:
        assert gateway.post("/v1/chat/completions", body, key=s.key).status_code == 200  # 0 < 5: admitted
    error = assert_rate_limited(gateway.post("/v1/chat/completions", body, key=s.key))
    assert f"allows 5 {meter} per 1d" in error["message"]
    assert fake.stats()["requests"] == 1


async def test_concurrency_limit_admits_exactly_n(gateway: Gateway, fake: FakeUpstream) -> None:
    limit = 2
    s = gateway.scenario(rules=[{"meter": "concurrency", "limit": limit}])
    body = {
        "model": s.model,
        "messages": [{"role": "user", "content": "hold on"}],
        "fake": {"latency_ms": 1000},  # every admitted request stays open upstream for 1 s
    }
    async with httpx.AsyncClient(base_url=gateway.url, headers=gateway.auth(s.key), timeout=30) as client:
        responses = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body) for _ in range(limit + 1))
        )
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [200] * limit + [429], [r.text for r in responses]
        refused = next(r for r in responses if r.status_code == 429)
        error = assert_rate_limited(refused)
        assert error["message"].endswith(f"allows {limit} concurrent requests")
        # the slots are given back when the requests end
        again = await client.post("/v1/chat/completions", json={**body, "fake": {}})
        assert again.status_code == 200, again.text
    assert fake.stats()["requests"] == limit + 1


def test_concurrency_slot_is_held_until_a_stream_ends(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(rules=[{"meter": "concurrency", "limit": 1}])
    body = {
        "model": s.model,
        "messages": [{"role": "user", "content": "a b c d e f"}],
        "stream": True,
        "fake": {"chunk_delay_ms": 60},
    }
    plain = {"model": s.model, "messages": [{"role": "user", "content": "hi"}]}
    with gateway.client.stream(
        "POST", "/v1/chat/completions", json=body, headers=gateway.auth(s.key)
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(lines).startswith("data:")
        # the stream is still running: its slot is taken
        assert_rate_limited(gateway.post("/v1/chat/completions", plain, key=s.key))
        rest = list(lines)
    assert "data: [DONE]" in rest
    assert gateway.post("/v1/chat/completions", plain, key=s.key).status_code == 200


def test_a_caller_leaving_mid_stream_gives_its_concurrency_slot_back(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = gateway.scenario(rules=[{"meter": "concurrency", "limit": 1}])
    body = {
        "model": s.model,
        "messages": [{"role": "user", "content": "a b c d e f"}],
        "stream": True,
        "fake": {"chunk_delay_ms": 50},
    }
    plain = {"model": s.model, "messages": [{"role": "user", "content": "hi"}]}
    with (
        httpx.Client(base_url=gateway.url, timeout=30) as caller,
        caller.stream("POST", "/v1/chat/completions", json=body, headers=gateway.auth(s.key)) as stream,
    ):
        assert stream.status_code == 200
        assert next(stream.iter_lines()).startswith("data:")
    # the caller hung up after the first event; the slot comes back (at the latest when the
    # upstream stream ends) instead of staying taken until the lease expires
    deadline = time.monotonic() + 10
    while (status := gateway.post("/v1/chat/completions", plain, key=s.key).status_code) == 429:
        assert time.monotonic() < deadline, "the concurrency slot was never released"
        time.sleep(0.05)
    assert status == 200
