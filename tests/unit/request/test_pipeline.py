"""``Pipeline.run`` in-process (SPEC §4–§6) over a hand-built snapshot, in-memory state and the real
fake upstream on loopback: the request sent, usage, failover on tripping statuses and its bound,
statuses passed through, breakers that keep a failed key out of the next request, streams settled by
``finish``, rate limits, and fallbacks to the next model of the policy."""

from __future__ import annotations

import json

import pytest

from relay.errors import RateLimited, RelayError
from relay.request.fallbacks import fallbacks_for
from relay.request.pipeline import UpstreamUnavailable
from tests.fixtures.fake_upstream import FakeUpstream
from tests.unit.request.conftest import CHAT_UPSTREAM, Core, CoreCatalog


def failing_pool(wired: CoreCatalog, *values: str) -> str:
    """A policy over keys of the wired host with the given upstream values (``fail-…`` names fail);
    returns the plaintext of a relay key governed by it."""
    keys = tuple(wired.build.host_key(f"pool-{i}", wired.host, value) for i, value in enumerate(values))
    policy = wired.build.policy("pool", keys=keys)
    return wired.build.key("pool", account=wired.account, policy=policy)[1]


async def test_a_request_reaches_the_upstream_with_its_model_and_first_key(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    outcome = await core.run(wired.snapshot(), wired.key)
    assert (outcome.status, outcome.attempts, outcome.host_key_id, outcome.error_kind) == (
        200,
        1,
        wired.k1.id,
        None,
    )
    assert outcome.body is not None and json.loads(outcome.body)["choices"][0]["message"]["content"]
    assert outcome.usage.input_tokens > 0 and outcome.usage.output_tokens > 0
    sent = fake.requests()[-1]
    assert (sent["path"], sent["key"], sent["body"]["model"]) == (
        "/v1/chat/completions",
        "ok-core-k1",
        CHAT_UPSTREAM,
    )


async def test_a_tripping_status_fails_over_to_the_next_key(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    key = failing_pool(wired, "fail-500-a", "fail-401-b", "ok-c")
    outcome = await core.run(wired.snapshot(), key)
    assert (outcome.status, outcome.attempts, outcome.host_key_id) == (200, 3, "hk_pool-2")
    assert [r["key"] for r in fake.requests()] == ["fail-500-a", "fail-401-b", "ok-c"]


async def test_failover_stops_after_three_keys_with_502_and_the_last_status(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    key = failing_pool(wired, "fail-500-a", "fail-503-b", "fail-502-c", "ok-d")
    with pytest.raises(UpstreamUnavailable) as caught:
        await core.run(wired.snapshot(), key)
    assert (caught.value.status, caught.value.code) == (502, "upstream_unavailable")
    assert (caught.value.attempts, caught.value.last_status) == (3, 502)
    assert str(caught.value) == 'all keys of host "core-openai" failed; last status 502'
    assert fake.stats()["by_key"].get("ok-d") is None


async def test_a_non_tripping_error_is_returned_as_it_is(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    key = failing_pool(wired, "fail-400-a", "ok-b")
    outcome = await core.run(wired.snapshot(), key)
    assert (outcome.status, outcome.attempts, outcome.error_kind) == (400, 1, "upstream_status")
    assert outcome.usage.total_tokens == 0
    assert fake.stats()["requests"] == 1


async def test_an_opened_breaker_keeps_the_key_out_of_the_next_request(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    key = failing_pool(wired, "fail-401-a", "ok-b")
    snapshot = wired.snapshot()
    assert (await core.run(snapshot, key)).attempts == 2
    again = await core.run(snapshot, key)
    assert (again.attempts, again.host_key_id) == (1, "hk_pool-1")
    assert fake.stats()["by_key"] == {"fail-401-a": 1, "ok-b": 2}


async def test_every_breaker_open_is_503_no_healthy_keys(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    key = failing_pool(wired, "fail-401-a")
    snapshot = wired.snapshot()
    with pytest.raises(UpstreamUnavailable):
        await core.run(snapshot, key)
    with pytest.raises(RelayError) as caught:
        await core.run(snapshot, key)
    assert (caught.value.status, caught.value.code) == (503, "no_healthy_keys")
    assert fake.stats()["requests"] == 1


async def test_a_stream_passes_through_and_finish_settles_its_usage(core: Core, wired: CoreCatalog) -> None:
    outcome = await core.pipeline.run(core.call(wired.snapshot(), wired.key, stream=True))
    assert outcome.status == 200 and outcome.content_type.startswith("text/event-stream")
    assert outcome.body is None and outcome.chunks is not None
    received = b"".join([chunk async for chunk in outcome.chunks])
    assert received.rstrip().endswith(b"data: [DONE]")
    assert b'"usage"' not in received  # Relay asked for the usage chunk; the caller did not
    usage = await outcome.finish()
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and outcome.ttft_ms is not None


async def test_a_requests_rule_refuses_past_its_limit_before_any_upstream_call(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    rules = ({"meter": "requests", "limit": 2, "window": "1h"},)
    limited = wired.build.policy("limited", keys=(wired.k1,), rules=rules)
    key = wired.build.key("limited", account=wired.account, policy=limited)[1]
    snapshot = wired.snapshot()
    for _ in range(2):
        assert (await core.run(snapshot, key)).status == 200
    with pytest.raises(RateLimited) as caught:
        await core.run(snapshot, key)
    assert (caught.value.status, caught.value.code) == (429, "rate_limit_exceeded")
    assert fake.stats()["requests"] == 2


async def test_an_unavailable_model_falls_back_to_the_next_one_in_the_policy(
    core: Core, wired: CoreCatalog, fake: FakeUpstream
) -> None:
    primary_host = wired.build.host("primary-host", wired.host.base_url)
    failing = wired.build.host_key("primary-k", primary_host, "fail-503-p")
    primary = wired.build.model("core-primary")
    wired.build.bind(primary, primary_host)
    fallbacks = {primary.id: ("core-chat",)}
    policy = wired.build.policy("falls", keys=(failing, wired.k1), fallbacks=fallbacks)
    key = wired.build.key("falls", account=wired.account, policy=policy)[1]
    snapshot = wired.snapshot()
    call = core.call(snapshot, key, "core-primary")
    assert call.plan.host.name == "primary-host"
    call.fallbacks = fallbacks_for(policy, "core-primary", snapshot, lambda plan: ("openai", call.body))
    outcome = await core.pipeline.run(call)
    assert (outcome.status, outcome.fallback_from, call.plan.model.name) == (200, "core-primary", "core-chat")
    assert [r["key"] for r in fake.requests()] == ["fail-503-p", "ok-core-k1"]
    assert fake.requests()[-1]["body"]["model"] == CHAT_UPSTREAM
