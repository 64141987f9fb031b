"""What a live request goes through after it is parsed, over HTTP against one ``relay serve`` per
backend (SQLite with hot state in process memory; Postgres with hot state in Redis):

- SPEC §4 routing: model and alias, grants, bindings, pool keys, ``model@host``;
- SPEC §5 rate limits: requests, token meters, concurrency, per policy and per credential;
- SPEC §6 the host-key pool: selection, breakers, failover and its bounds;
- SPEC §12 what the request leaves behind: metrics and one log line.

The fake upstream records the upstream key and body of every request, so where a request went and
which keys were tried in which order is visible. Key values follow the fake's naming convention
(``fail-500-…`` always answers 500, …; see docs/fake-upstream.md). Breakers, counters and limits are
per host key or policy, so each test builds its own host, keys, model and policy (random names) and
nothing leaks between the tests sharing the module's process.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_ALIAS,
    CHAT_MODEL,
    CHAT_UPSTREAM,
    EMBED_MODEL,
    HOST_ANTHROPIC,
    HOST_OPENAI,
    MESSAGES_MODEL,
    RESPONSES_MODEL,
    Gateway,
    Scenario,
    metric_value,
)
from tests.live.helpers import assert_anthropic_error, assert_openai_error, keys_called, last_upstream

MAIN_KEYS = {host: f"{host}-k1" for host in (HOST_OPENAI, HOST_ANTHROPIC)}


def messages(
    gateway: Gateway, model: str, key: str | None = None, path: str = "/anthropic/v1/messages"
) -> httpx.Response:
    body = {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "hello there"}]}
    return gateway.post(path, body, key=key)


# --- §4.1 the model --------------------------------------------------------------------------------


def test_unknown_model_is_404(gateway: Gateway, fake: FakeUpstream) -> None:
    error = assert_openai_error(gateway.chat("no-such-model"), 404, "model_not_found", "not_found_error")
    assert error["message"] == 'model "no-such-model" not found'
    # pinned to a host that does not exist
    error = assert_openai_error(gateway.chat(f"{CHAT_MODEL}@no-such-host"), 404, "model_not_found")
    assert "no-such-host" in error["message"]
    assert_anthropic_error(messages(gateway, "no-such-model"), 404, "not_found_error")
    assert fake.stats()["requests"] == 0


def test_disabled_model_is_403(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario()
    assert gateway.chat(s.model, key=s.key).status_code == 200
    gateway.patch("models", s.model, {"enabled": False})
    error = assert_openai_error(gateway.chat(s.model, key=s.key), 403, "model_disabled", "permission_error")
    assert s.model in error["message"]
    gateway.patch("models", s.model, {"enabled": True})
    assert gateway.chat(s.model, key=s.key).status_code == 200
    assert fake.stats()["requests"] == 2


def test_alias_resolves_to_the_model_and_its_upstream_name(gateway: Gateway, fake: FakeUpstream) -> None:
    for requested in (CHAT_ALIAS, f"{CHAT_ALIAS}@{HOST_OPENAI}", f"  {CHAT_MODEL}  "):
        response = gateway.chat(requested)
        assert response.status_code == 200, (requested, response.text)
        assert last_upstream(fake)["body"]["model"] == CHAT_UPSTREAM


# --- §4.2 the grant -------------------------------------------------------------------------------


def test_model_not_granted_is_403(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(models=[EMBED_MODEL])
    error = assert_openai_error(
        gateway.chat(s.model, key=s.key), 403, "model_not_allowed", "permission_error"
    )
    assert error["message"] == f'policy "{s.policy}" does not allow model "{s.model}"'
    # an unknown model is still "not found", whatever the grants
    assert_openai_error(gateway.chat("no-such-model", key=s.key), 404, "model_not_found")
    # an empty grant list grants nothing
    gateway.patch("policies", s.policy, {"models": []})
    assert_openai_error(gateway.chat(s.model, key=s.key), 403, "model_not_allowed")
    assert fake.stats()["requests"] == 0


@pytest.mark.parametrize(
    ("grants", "allowed", "refused"),
    [
        ([CHAT_ALIAS], CHAT_MODEL, EMBED_MODEL),  # a grant may name the model by alias
        (["anthropic/*"], MESSAGES_MODEL, CHAT_MODEL),  # every model of a provider
        ([f"{CHAT_MODEL}@{HOST_OPENAI}"], CHAT_MODEL, EMBED_MODEL),  # one binding
    ],
)
def test_grant_forms(
    gateway: Gateway, fake: FakeUpstream, grants: list[str], allowed: str, refused: str
) -> None:
    policy = gateway.new_policy(models=grants, host_keys=list(MAIN_KEYS.values()))
    _, key = gateway.mint_key(policy["name"])

    def call(model: str) -> httpx.Response:
        return messages(gateway, model, key) if model == MESSAGES_MODEL else gateway.chat(model, key=key)

    assert call(allowed).status_code == 200
    assert_openai_error(gateway.chat(refused, key=key), 403, "model_not_allowed")


def test_host_grant_allows_the_models_on_that_host(gateway: Gateway, fake: FakeUpstream) -> None:
    policy = gateway.new_policy(models=[f"@{HOST_ANTHROPIC}"], host_keys=list(MAIN_KEYS.values()))
    _, key = gateway.mint_key(policy["name"])
    assert messages(gateway, MESSAGES_MODEL, key).status_code == 200
    listed = gateway.client.get("/v1/models", headers=gateway.auth(key)).json()["data"]
    assert [m["id"] for m in listed] == [MESSAGES_MODEL]


@pytest.mark.parametrize("grant", [f"@{HOST_ANTHROPIC}", f"{CHAT_MODEL}@{HOST_ANTHROPIC}"])
def test_host_scoped_grant_does_not_allow_the_model_elsewhere(gateway: Gateway, grant: str) -> None:
    # CHAT_MODEL has one binding, on HOST_OPENAI; the policy's pool has keys on both hosts.
    policy = gateway.new_policy(models=[grant], host_keys=list(MAIN_KEYS.values()))
    _, key = gateway.mint_key(policy["name"])
    listed = gateway.client.get("/v1/models", headers=gateway.auth(key)).json()["data"]
    assert CHAT_MODEL not in [m["id"] for m in listed]
    assert_openai_error(gateway.chat(CHAT_MODEL, key=key), 403, "model_not_allowed")


# --- §4.3 the binding and the pool ------------------------------------------------------------------


def test_no_binding_on_a_host_with_pool_keys_is_503(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario()  # grants *, but its pool only has keys on its own host
    error = assert_openai_error(gateway.chat(CHAT_MODEL, key=s.key), 503, "no_binding", "api_error")
    assert CHAT_MODEL in error["message"]
    # the scenario's own model: its only binding disabled, then its host disabled
    gateway.patch("bindings", s.binding, {"enabled": False})
    assert_openai_error(gateway.chat(s.model, key=s.key), 503, "no_binding")
    gateway.patch("bindings", s.binding, {"enabled": True})
    assert gateway.chat(s.model, key=s.key).status_code == 200
    gateway.patch("hosts", s.host, {"enabled": False})
    assert_openai_error(gateway.chat(s.model, key=s.key), 503, "no_binding")
    assert_anthropic_error(messages(gateway, MESSAGES_MODEL, s.key), 503, "overloaded_error")
    assert fake.stats()["requests"] == 1


def test_pool_keys_all_disabled_is_503_no_keys(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["ok", "ok"])
    gateway.patch("host-keys", s.host_keys[0]["name"], {"enabled": False})
    assert gateway.chat(s.model, key=s.key).status_code == 200
    assert last_upstream(fake)["key"] == s.value(1)
    gateway.patch("host-keys", s.host_keys[1]["name"], {"enabled": False})
    error = assert_openai_error(gateway.chat(s.model, key=s.key), 503, "no_keys", "api_error")
    assert s.host in error["message"]
    assert fake.stats()["requests"] == 1


def test_first_binding_wins_and_model_at_host_pins(gateway: Gateway, fake: FakeUpstream) -> None:
    host_a, host_b = gateway.new_host("pin-a"), gateway.new_host("pin-b")
    key_a = gateway.new_host_key(host_a["name"], "key-a")
    key_b = gateway.new_host_key(host_b["name"], "key-b")
    model = gateway.new_model(host_a["name"], upstream_name="up-on-a")  # the first binding
    gateway.bind(model, host_b["name"], upstream_name="up-on-b")
    # Pool order puts B's key first: the binding order, not the pool order, picks the host.
    policy = gateway.new_policy(host_keys=[key_b["name"], key_a["name"]])
    _, key = gateway.mint_key(policy["name"])

    def routed(requested: str) -> tuple[str, str]:
        response = gateway.chat(requested, key=key)
        assert response.status_code == 200, response.text
        received = last_upstream(fake)
        return received["key"], received["body"]["model"]

    assert routed(model) == (key_a["value"], "up-on-a")
    assert routed(f"{model}@{host_b['name']}") == (key_b["value"], "up-on-b")
    assert routed(f"{model}@{host_a['name']}") == (key_a["value"], "up-on-a")
    # A policy without keys on A: the first binding whose host has pool keys is B's.
    only_b = gateway.new_policy(host_keys=[key_b["name"]])
    _, key_only_b = gateway.mint_key(only_b["name"])
    assert gateway.chat(model, key=key_only_b).status_code == 200
    assert last_upstream(fake)["key"] == key_b["value"]
    # Pinned to A with no key of A in the pool: no binding to use.
    assert_openai_error(gateway.chat(f"{model}@{host_a['name']}", key=key_only_b), 503, "no_binding")


def test_model_at_host_grant_allows_only_that_binding(gateway: Gateway, fake: FakeUpstream) -> None:
    host_a, host_b = gateway.new_host("ga"), gateway.new_host("gb")
    key_a = gateway.new_host_key(host_a["name"], "key-a")
    key_b = gateway.new_host_key(host_b["name"], "key-b")
    model = gateway.new_model(host_a["name"])
    gateway.bind(model, host_b["name"])
    policy = gateway.new_policy(
        models=[f"{model}@{host_b['name']}"], host_keys=[key_a["name"], key_b["name"]]
    )
    _, key = gateway.mint_key(policy["name"])
    # Unpinned, the first binding (A) is not granted: the request goes to B.
    assert gateway.chat(model, key=key).status_code == 200
    assert last_upstream(fake)["key"] == key_b["value"]
    assert gateway.chat(f"{model}@{host_b['name']}", key=key).status_code == 200
    assert last_upstream(fake)["key"] == key_b["value"]
    assert_openai_error(gateway.chat(f"{model}@{host_a['name']}", key=key), 403, "model_not_allowed")
    assert_openai_error(gateway.chat(CHAT_MODEL, key=key), 403, "model_not_allowed")
    assert keys_called(fake) == [key_b["value"], key_b["value"]]


@pytest.mark.parametrize(
    ("path", "model", "anthropic_shaped", "code"),
    [
        ("/v1/embeddings", MESSAGES_MODEL, False, "unsupported_binding"),
        ("/openai/v1/embeddings", RESPONSES_MODEL, False, "unsupported_binding"),
        ("/openai/v1/chat/completions", MESSAGES_MODEL, False, "unsupported_parameter"),
        ("/anthropic/v1/messages", CHAT_MODEL, True, "unsupported_parameter"),
    ],
)
def test_cross_shape_request_is_refused_before_the_upstream(
    gateway: Gateway, fake: FakeUpstream, path: str, model: str, anthropic_shaped: bool, code: str
) -> None:
    """SPEC §7.3: embeddings are never translated; a translated request with a field that has no
    counterpart (here ``input`` on a chat or messages body) is refused before any upstream call."""
    body = {"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], "input": "hi"}
    response = gateway.post(path, body)
    if anthropic_shaped:
        error = assert_anthropic_error(response, 400, "invalid_request_error")
        assert error["message"] == "unsupported_parameter: input (adapter openai)"
    else:
        assert_openai_error(response, 400, code, "invalid_request_error")
    assert fake.stats()["requests"] == 0


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


def chat(gateway: Gateway, s: Scenario, **extra: Any) -> httpx.Response:
    body = {"model": s.model, "messages": [{"role": "user", "content": "hello there"}], **extra}
    return gateway.post("/v1/chat/completions", body, key=s.key)


def ok(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Echo: hello there"


# --- §6 selection -------------------------------------------------------------------------------------


def test_prioritized_uses_the_first_key(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["a", "b", "c"])
    for _ in range(3):
        ok(chat(gateway, s))
    assert keys_called(fake) == [s.value(0)] * 3


def test_round_robin_rotates_over_the_pool(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["a", "b", "c"], key_selection="round_robin")
    for _ in range(6):
        ok(chat(gateway, s))
    called = keys_called(fake)
    assert sorted(called[:3]) == sorted(s.value(i) for i in range(3))  # each key once per round
    assert called[3:] == called[:3]  # and the same order again


def test_least_recently_used_picks_the_oldest_key(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["a", "b", "c"], key_selection="least_recently_used")
    for _ in range(6):
        ok(chat(gateway, s))
    a, b, c = (s.value(i) for i in range(3))
    assert keys_called(fake) == [a, b, c, a, b, c]


# --- §6 breakers and failover ----------------------------------------------------------------------------


def test_auth_failure_fails_over_and_opens_until_the_key_is_edited(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = gateway.scenario(["fail-401", "ok"])
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))  # 401 from the first key: the next key answers
    assert keys_called(fake) == [bad, good]
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good, good]  # the 401 key is skipped, however long
    # Editing the key (same value: the version changes) re-arms it: it is tried again, and fails again.
    gateway.patch("host-keys", s.host_keys[0]["name"], {"value": bad})
    ok(chat(gateway, s))
    assert keys_called(fake)[4:] == [bad, good]
    ok(chat(gateway, s))
    assert keys_called(fake)[6:] == [good]
    # Disabling and re-enabling it does too.
    gateway.patch("host-keys", s.host_keys[0]["name"], {"enabled": False})
    gateway.patch("host-keys", s.host_keys[0]["name"], {"enabled": True})
    ok(chat(gateway, s))
    assert keys_called(fake)[7:] == [bad, good]


def test_short_429_fails_over_without_tripping(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-429", "ok"])  # 429 with Retry-After: 1
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, bad, good]  # tried first again every time


def test_long_429_opens_the_breaker(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-429-ra30", "ok"])  # 429 with Retry-After: 30
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good]


def test_5xx_opens_with_backoff_then_half_open(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "ok"])
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good]  # open for 1 s
    time.sleep(1.2)
    ok(chat(gateway, s))  # half-open: tried again (and fails again)
    assert keys_called(fake)[3:] == [bad, good]
    ok(chat(gateway, s))  # open again, now for 2 s
    assert keys_called(fake)[5:] == [good]


def test_connection_error_trips_and_fails_over(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-conn", "ok"])
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    recorded = fake.requests()
    assert [r["key"] for r in recorded] == [bad, good]
    assert recorded[0]["status"] is None  # the fake dropped the connection
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good]


def test_failover_of_a_stream_before_its_first_byte(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "ok"])
    body = {"model": s.model, "messages": [{"role": "user", "content": "hello there"}], "stream": True}
    result = gateway.stream("/v1/chat/completions", body, key=s.key)
    assert result.status == 200
    assert result.events[-1].data == "[DONE]"
    assert keys_called(fake) == [s.value(0), s.value(1)]


def test_a_stream_that_breaks_after_its_first_byte_is_not_retried(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = gateway.scenario(["ok", "ok"])
    body = {
        "model": s.model,
        "messages": [{"role": "user", "content": "one two three four five"}],
        "stream": True,
        "fake": {"fail_after_chunks": 2},
    }
    try:
        result = gateway.stream("/v1/chat/completions", body, key=s.key)
        events = result.events
        assert result.status == 200
    except httpx.RemoteProtocolError:  # the caller may see the cut as an incomplete chunked body
        events = []
    assert all(e.data != "[DONE]" for e in events)
    assert keys_called(fake) == [s.value(0)]


def test_every_key_failing_is_502(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "fail-500", "fail-500"])
    error = assert_openai_error(chat(gateway, s), 502, "upstream_unavailable", "api_error")
    assert error["message"] == f'all keys of host "{s.host}" failed; last status 500'
    assert keys_called(fake) == [s.value(0), s.value(1), s.value(2)]


def test_failover_tries_at_most_three_keys(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "fail-503", "fail-502", "ok"])
    error = assert_openai_error(chat(gateway, s), 502, "upstream_unavailable")
    assert error["message"] == f'all keys of host "{s.host}" failed; last status 502'
    assert fake.stats()["requests"] == 3
    assert s.value(3) not in keys_called(fake)


def test_every_breaker_open_is_503(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-429-ra30", "fail-429-ra30"])
    error = assert_openai_error(chat(gateway, s), 502, "upstream_unavailable")
    assert error["message"] == f'all keys of host "{s.host}" failed; last status 429'
    error = assert_openai_error(chat(gateway, s), 503, "no_healthy_keys", "api_error")
    assert error["message"] == f'no healthy keys for host "{s.host}"'
    assert fake.stats()["requests"] == 2  # the second request reached no upstream


def test_every_breaker_open_in_the_anthropic_shape(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-401"], adapter="anthropic")
    body = {"model": s.model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    first = assert_anthropic_error(gateway.post("/anthropic/v1/messages", body, key=s.key), 502, "api_error")
    assert first["message"] == f'all keys of host "{s.host}" failed; last status 401'
    again = assert_anthropic_error(
        gateway.post("/anthropic/v1/messages", body, key=s.key), 503, "overloaded_error"
    )
    assert again["message"] == f'no healthy keys for host "{s.host}"'


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_upstream_statuses_are_returned_as_they_are(
    gateway: Gateway, fake: FakeUpstream, status: int
) -> None:
    s = gateway.scenario(["ok", "ok"])
    response = chat(gateway, s, fake={"status": status})
    assert response.status_code == status
    assert response.headers["x-relay-request-id"]
    upstream_error = response.json()["error"]
    assert "param" in upstream_error  # the provider's body (Relay's own errors have no `param`)
    assert fake.requests()[0]["status"] == status
    assert keys_called(fake) == [s.value(0)]  # no failover
    ok(chat(gateway, s))  # and no trip: the first key still serves
    assert keys_called(fake) == [s.value(0), s.value(0)]


def test_an_upstream_error_to_a_stream_request_comes_back_whole(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["ok", "ok"])
    response = chat(gateway, s, stream=True, fake={"status": 400})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert keys_called(fake) == [s.value(0)]


def test_a_failed_request_gives_its_concurrency_slot_back(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500"], rules=[{"meter": "concurrency", "limit": 1}])
    assert_openai_error(chat(gateway, s), 502, "upstream_unavailable")
    # not 429: the slot of the failed request was released; the key's breaker is open now
    assert_openai_error(chat(gateway, s), 503, "no_healthy_keys")


# --- §12 metrics -------------------------------------------------------------------------------------


def wait_metric(gateway: Gateway, name: str, at_least: float, **labels: str) -> float:
    """Metrics are recorded after the caller has its last byte: poll briefly."""
    deadline = time.monotonic() + 5
    while True:
        value = metric_value(gateway.metrics(), name, **labels)
        if value >= at_least or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def test_request_and_latency_metrics(gateway: Gateway, fake: FakeUpstream) -> None:
    before = gateway.metrics()
    ok_labels = {"route": "/openai/v1/chat/completions", "shape": "openai", "status": "200"}
    missing_labels = {"route": "/v1/chat/completions", "shape": "openai", "status": "404"}
    ok_before = metric_value(before, "relay_requests_total", **ok_labels)
    missing_before = metric_value(before, "relay_requests_total", **missing_labels)
    overhead_before = metric_value(before, "relay_gateway_overhead_seconds_count", shape="openai")
    upstream_before = metric_value(before, "relay_upstream_latency_seconds_count", host=HOST_OPENAI)

    assert gateway.chat().status_code == 200
    assert gateway.post("/v1/chat/completions", {"model": "no-such-model"}).status_code == 404

    assert wait_metric(gateway, "relay_requests_total", ok_before + 1, **ok_labels) == ok_before + 1
    assert (
        wait_metric(gateway, "relay_requests_total", missing_before + 1, **missing_labels)
        == missing_before + 1
    )
    after = gateway.metrics()
    assert metric_value(after, "relay_gateway_overhead_seconds_count", shape="openai") == overhead_before + 1
    assert (
        metric_value(after, "relay_upstream_latency_seconds_count", host=HOST_OPENAI) == upstream_before + 1
    )
    assert "relay_gateway_overhead_seconds_bucket{" in after
    assert "relay_upstream_latency_seconds_bucket{" in after


def test_rate_limit_rejection_metric(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(rules=[{"meter": "requests", "limit": 1, "window": "1d"}])
    ok(chat(gateway, s))
    assert chat(gateway, s).status_code == 429
    name = s.policy
    assert wait_metric(gateway, "relay_rate_limit_rejections_total", 1, policy=name) == 1
    assert wait_metric(gateway, "relay_requests_total", 1, route="/v1/chat/completions", status="429") >= 1


def test_breaker_metrics(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "ok"])
    ok(chat(gateway, s))
    bad, good = (gateway.object_id("host-keys", k["name"]) for k in s.host_keys)
    assert wait_metric(gateway, "relay_breaker_trips_total", 1, host_key=bad, kind="server") == 1
    text = gateway.metrics()
    assert metric_value(text, "relay_breaker_trips_total", host_key=good) == 0
    assert metric_value(text, "relay_breaker_open", host_key=bad) == 1
    assert metric_value(text, "relay_breaker_open", host_key=good) == 0


# --- §12 the request log -------------------------------------------------------------------------------


def lines_for(gateway: Gateway, request_id: str) -> list[dict[str, Any]]:
    gateway.wait_log_line(request_id)
    return [r for r in gateway.log_records() if r.get("request_id") == request_id]


def test_one_log_line_per_request_without_secrets_or_bodies(gateway: Gateway, fake: FakeUpstream) -> None:
    marker = "body-marker-7c1f0d2e"
    policy_id = gateway.relay.api("GET", "/api/policies/live-main").json()["id"]
    failing = gateway.scenario(["fail-500", "ok"])
    calls = {
        "ok": gateway.post(
            "/v1/chat/completions", {"model": CHAT_MODEL, "messages": [{"role": "user", "content": marker}]}
        ),
        "failover": chat(gateway, failing),
        "not_found": gateway.post("/v1/chat/completions", {"model": "no-such-model", "marker": marker}),
        "unauthenticated": gateway.post(
            "/v1/chat/completions", {"model": CHAT_MODEL, "marker": marker}, key="sk-relay-" + "x" * 43
        ),
        "bad_json": gateway.post("/v1/chat/completions", content=b'{"marker": "' + marker.encode()),
    }
    stream = gateway.stream(
        "/v1/chat/completions",
        {"model": CHAT_MODEL, "stream": True, "messages": [{"role": "user", "content": marker}]},
    )
    request_ids = {name: r.headers["x-relay-request-id"] for name, r in calls.items()}
    request_ids["stream"] = stream.headers["x-relay-request-id"]
    statuses = {name: r.status_code for name, r in calls.items()} | {"stream": stream.status}
    for name, request_id in request_ids.items():
        lines = lines_for(gateway, request_id)
        assert len(lines) == 1, (name, lines)
        line = lines[0]
        assert line["status"] == statuses[name], (name, line)
        assert isinstance(line["latency_ms"], int) and line["latency_ms"] >= 0, line
        assert line["level"] == "info" and line["msg"] == "request"
    for name in ("ok", "stream", "not_found"):
        line = lines_for(gateway, request_ids[name])[0]
        assert line["policy_id"] == policy_id, line
        assert line["project_id"] and line["principal_id"] and line["credential_id"], line
    assert lines_for(gateway, request_ids["failover"])[0]["policy_id"] == gateway.object_id(
        "policies", failing.policy
    )
    assert "policy_id" not in lines_for(gateway, request_ids["unauthenticated"])[0]

    log = gateway.relay.logs()
    secrets = [
        gateway.key,
        failing.key,
        *gateway.host_key_values.values(),
        failing.value(0),
        failing.value(1),
    ]
    for secret in secrets:
        assert secret not in log
    assert marker not in log


def answered_by_the_app(gateway: Gateway) -> list[httpx.Response]:
    """Requests the inference app answers without the live pipeline: 405, unknown route, model list."""
    return [
        gateway.client.get("/v1/chat/completions"),
        gateway.client.post("/v1/no-such-route", json={}),
        gateway.client.get("/v1/models", headers=gateway.auth(None)),
    ]


def test_requests_answered_before_the_pipeline_are_logged_too(gateway: Gateway) -> None:
    """Regression: 405s, unknown routes and GET /v1/models handed out a request id that no log line
    carried (and were not counted in relay_requests_total)."""
    before = metric_value(gateway.metrics(), "relay_requests_total", status="405")
    for response in answered_by_the_app(gateway):
        line = gateway.wait_log_line(response.headers["x-relay-request-id"])
        assert line["status"] == response.status_code, line
    assert metric_value(gateway.metrics(), "relay_requests_total", status="405") == before + 1


def test_lines_of_requests_answered_by_the_app_are_complete(gateway: Gateway) -> None:
    responses = answered_by_the_app(gateway)
    lines = [gateway.wait_log_line(r.headers["x-relay-request-id"]) for r in responses]
    assert all(isinstance(line.get("latency_ms"), int) for line in lines), lines
    assert lines[-1].get("policy_id") == gateway.object_id("policies", gateway.policy), lines[-1]


def test_log_line_carries_every_attribution_id(gateway: Gateway, fake: FakeUpstream) -> None:
    """Regression: the line had policy, project, principal and credential ids but not team_id."""
    response = gateway.chat()
    line = lines_for(gateway, response.headers["x-relay-request-id"])[0]
    team_id = gateway.relay.api("GET", "/api/teams/live-team").json()["id"]
    assert {"policy_id", "project_id", "principal_id", "credential_id", "team_id"} <= set(line), json.dumps(
        line
    )
    assert line["team_id"] == team_id


# --- catalog edits under live traffic -------------------------------------------------------------------


def test_catalog_writes_succeed_during_live_traffic(gateway: Gateway) -> None:
    """Routing follows catalog edits made while requests flow (the tests above edit models, bindings,
    hosts and keys between calls); an edit must not fail because the usage writer is busy.

    Regression: on SQLite a control-plane write that reads before it writes (a PATCH, a POST with
    references) ran in a deferred transaction and answered 500 "database is locked" whenever the usage
    writer committed in between (SQLite refuses that lock upgrade at once, whatever busy_timeout says).
    """
    stop = threading.Event()

    def traffic() -> None:
        body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "background"}]}
        with httpx.Client(base_url=gateway.url, headers=gateway.auth(None), timeout=30) as client:
            while not stop.is_set():
                client.post("/v1/chat/completions", json=body)

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    outcomes: list[int | str] = []
    try:
        for _ in range(15):
            try:
                response = gateway.relay.api("PATCH", f"/api/hosts/{HOST_OPENAI}", {"enabled": True})
                outcomes.append(response.status_code)
            except httpx.TransportError as exc:
                outcomes.append(type(exc).__name__)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert outcomes == [200] * 15, outcomes
