"""``LiveHandler`` behind ``InferenceApp``, in-process (SPEC §3–§8): routing, authentication failures,
whole and streamed answers, failover over a host's keys, fallback models, translated requests and the
one usage event of each request — over ``httpx.ASGITransport``, a hand-built catalog, the real request
core on in-memory state and the session's real fake upstream.

What only a ``relay serve`` process shows (sockets, signals, replicas, start-up, the control API's
edits reaching a running process) stays in ``tests/live``.
"""

from __future__ import annotations

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.planes import CHAT_MODEL, CHAT_UPSTREAM, Scenario
from tests.fixtures.sse import parse_sse
from tests.unit.inference.conftest import (
    CHAT_PATH,
    MESSAGES_PATH,
    LivePlane,
    anthropic_error,
    chat,
    message,
    openai_error,
)


def keys_called(fake: FakeUpstream) -> list[str]:
    return [r["key"] for r in fake.requests()]


def values(s: Scenario) -> list[str]:
    return [k.value or "" for k in s.keys]


# ---------------------------------------------------------------------------------------- routing


async def test_a_request_goes_to_the_bound_host_with_the_upstream_model(
    plane: LivePlane, fake: FakeUpstream
) -> None:
    response = await plane.post(CHAT_PATH, chat())
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Echo: hello there"
    request_id = response.headers["x-relay-request-id"]
    sent = fake.requests()[-1]
    assert (sent["path"], sent["key"], sent["body"]["model"]) == (CHAT_PATH, "ok-plane-k1", CHAT_UPSTREAM)
    [event] = await plane.events()
    c = plane.catalog
    assert (event["request_id"], event["source"], event["status"], event["error_kind"]) == (
        request_id,
        "live",
        200,
        None,
    )
    assert (event["model"], event["requested_model"], event["upstream_model"]) == (
        CHAT_MODEL,
        CHAT_MODEL,
        CHAT_UPSTREAM,
    )
    assert (event["host"], event["adapter"], event["host_key_id"], event["attempts"]) == (
        "plane-openai",
        "openai",
        c.k1.id,
        1,
    )
    assert (event["policy_id"], event["project_id"], event["team_id"]) == (
        c.policy.id,
        c.project.id,
        c.team.id,
    )
    assert (event["principal_id"], event["credential_kind"], event["credential_id"]) == (
        c.account.id,
        "key",
        c.relay_key.id,
    )
    assert event["relay_key_hash"] == c.relay_key.key_hash and event["inbound_shape"] == "openai"
    assert event["input_tokens"] > 0 and event["output_tokens"] > 0 and event["cost_nanos"] > 0
    assert event["streamed"] is False and event["ttft_ms"] is None


async def test_unknown_model_is_404(plane: LivePlane, fake: FakeUpstream) -> None:
    error = openai_error(
        await plane.post(CHAT_PATH, chat("no-such-model")), 404, "model_not_found", "not_found_error"
    )
    assert error["message"] == 'model "no-such-model" not found'
    pinned = openai_error(
        await plane.post(CHAT_PATH, chat(f"{CHAT_MODEL}@no-such-host")), 404, "model_not_found"
    )
    assert "no-such-host" in pinned["message"]
    anthropic_error(await plane.post(MESSAGES_PATH, message("no-such-model")), 404, "not_found_error")
    assert fake.stats()["requests"] == 0
    events = await plane.events()
    assert [(e["status"], e["error_kind"], e["model"], e["host"]) for e in events] == [
        (0, "model_not_found", "no-such-model", ""),
        (0, "model_not_found", f"{CHAT_MODEL}@no-such-host", ""),
        (0, "model_not_found", "no-such-model", ""),
    ]
    assert events[0]["error_message"] == 'model "no-such-model" not found'


async def test_model_not_granted_is_403(plane: LivePlane, fake: FakeUpstream) -> None:
    c = plane.catalog
    c.build.model("embed-only")
    narrow = c.build.policy("narrow", models=("embed-only",), keys=(c.k1,))
    key = c.build.key("narrow", account=c.account, policy=narrow)[1]
    empty = c.build.policy("empty", models=(), keys=(c.k1,))
    nothing = c.build.key("empty", account=c.account, policy=empty)[1]
    plane.refresh()
    error = openai_error(
        await plane.post(CHAT_PATH, chat(), key=key), 403, "model_not_allowed", "permission_error"
    )
    assert error["message"] == f'policy "narrow" does not allow model "{CHAT_MODEL}"'
    openai_error(await plane.post(CHAT_PATH, chat("no-such-model"), key=key), 404, "model_not_found")
    openai_error(await plane.post(CHAT_PATH, chat(), key=nothing), 403, "model_not_allowed")
    assert fake.stats()["requests"] == 0


# ---------------------------------------------------------------------------------------- auth


async def test_authentication_failures_are_401_in_the_callers_shape_and_record_nothing(
    plane: LivePlane, fake: FakeUpstream
) -> None:
    c = plane.catalog
    missing = await plane.client.post(CHAT_PATH, json=chat())
    openai_error(missing, 401, "unauthenticated", "authentication_error")
    wrong = await plane.post(CHAT_PATH, chat(), key="sk-relay-not-a-key-xxxxxxxxxxxxxxxxxxxx")
    openai_error(wrong, 401, "unauthenticated")
    c.build.change(c.relay_key, enabled=False)
    plane.refresh()
    disabled = await plane.post(CHAT_PATH, chat())
    assert openai_error(disabled, 401, "unauthenticated")["message"] == "api key disabled"
    anthropic_error(
        await plane.client.post(MESSAGES_PATH, json=message(CHAT_MODEL)), 401, "authentication_error"
    )
    assert fake.stats()["requests"] == 0
    assert await plane.events() == []  # no attribution, no usage event (SPEC §8)


# ---------------------------------------------------------------------------------------- answers


async def test_a_stream_passes_through_and_its_event_has_the_usage(plane: LivePlane) -> None:
    async with plane.client.stream(
        "POST", CHAT_PATH, json=chat(stream=True), headers={"authorization": f"Bearer {plane.catalog.key}"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b"".join([chunk async for chunk in response.aiter_bytes()])
    events = [data for _, data in parse_sse(raw)]
    assert events[-1] == "[DONE]"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])
    assert text == "Echo: hello there"
    assert b'"usage"' not in raw  # Relay asked for the usage chunk; the caller did not
    [event] = await plane.events()
    assert (event["status"], event["streamed"], event["error_kind"]) == (200, True, None)
    assert event["input_tokens"] > 0 and event["output_tokens"] > 0 and event["cost_nanos"] > 0
    assert event["ttft_ms"] is not None


async def test_an_upstream_error_is_returned_as_it_is(plane: LivePlane, fake: FakeUpstream) -> None:
    """A non-failover status is the upstream's answer (its body, its status), unpriced; a stream
    request answered with an error comes back whole."""
    s = plane.catalog.scenario(("ok", "ok"))
    plane.refresh()
    for status in (400, 404, 422):
        response = await plane.post(CHAT_PATH, chat(s.model.name, fake={"status": status}), key=s.key)
        assert response.status_code == status and response.headers["x-relay-request-id"]
        assert "param" in response.json()["error"]  # the provider's body (Relay's own errors have no `param`)
    streamed = await plane.post(CHAT_PATH, chat(s.model.name, stream=True, fake={"status": 400}), key=s.key)
    assert streamed.status_code == 400 and streamed.headers["content-type"].startswith("application/json")
    assert streamed.json()["error"]["type"] == "invalid_request_error"
    assert [r["status"] for r in fake.requests()] == [400, 404, 422, 400]
    assert (await plane.post(CHAT_PATH, chat(s.model.name), key=s.key)).status_code == 200
    assert keys_called(fake) == [values(s)[0]] * 5  # no failover, and no trip: the first key still serves
    events = await plane.events()
    assert [(e["status"], e["error_kind"], e["cost_nanos"]) for e in events[:4]] == [
        (400, "upstream_status", None),
        (404, "upstream_status", None),
        (422, "upstream_status", None),
        (400, "upstream_status", None),
    ]
    assert events[4]["status"] == 200 and events[4]["cost_nanos"] > 0
    assert events[0]["error_message"] == "upstream returned 400"


# ---------------------------------------------------------------------------------------- failover


async def test_a_tripping_status_fails_over_to_the_next_key(plane: LivePlane, fake: FakeUpstream) -> None:
    s = plane.catalog.scenario(("fail-500", "ok"))
    plane.refresh()
    response = await plane.post(CHAT_PATH, chat(s.model.name), key=s.key)
    assert response.status_code == 200, response.text
    assert keys_called(fake) == values(s)
    [event] = await plane.events()
    assert (event["attempts"], event["host_key_id"], event["status"]) == (2, s.keys[1].id, 200)


async def test_every_key_failing_is_502(plane: LivePlane, fake: FakeUpstream) -> None:
    s = plane.catalog.scenario(("fail-500", "fail-500", "fail-500"))
    plane.refresh()
    error = openai_error(
        await plane.post(CHAT_PATH, chat(s.model.name), key=s.key), 502, "upstream_unavailable", "api_error"
    )
    assert error["message"] == f'all keys of host "{s.host.name}" failed; last status 500'
    assert keys_called(fake) == values(s)
    [event] = await plane.events()
    assert (event["status"], event["error_kind"], event["attempts"], event["host"]) == (
        500,
        "upstream_unavailable",
        3,
        s.host.name,
    )


async def test_failover_tries_at_most_three_keys(plane: LivePlane, fake: FakeUpstream) -> None:
    s = plane.catalog.scenario(("fail-500", "fail-503", "fail-502", "ok"))
    plane.refresh()
    error = openai_error(
        await plane.post(CHAT_PATH, chat(s.model.name), key=s.key), 502, "upstream_unavailable"
    )
    assert error["message"] == f'all keys of host "{s.host.name}" failed; last status 502'
    assert fake.stats()["requests"] == 3 and values(s)[3] not in keys_called(fake)


async def test_every_breaker_open_is_503(plane: LivePlane, fake: FakeUpstream) -> None:
    s = plane.catalog.scenario(("fail-429-ra30", "fail-429-ra30"))
    plane.refresh()
    first = openai_error(
        await plane.post(CHAT_PATH, chat(s.model.name), key=s.key), 502, "upstream_unavailable"
    )
    assert first["message"] == f'all keys of host "{s.host.name}" failed; last status 429'
    again = openai_error(
        await plane.post(CHAT_PATH, chat(s.model.name), key=s.key), 503, "no_healthy_keys", "api_error"
    )
    assert again["message"] == f'no healthy keys for host "{s.host.name}"'
    assert fake.stats()["requests"] == 2  # the second request reached no upstream


async def test_every_breaker_open_in_the_anthropic_shape(plane: LivePlane) -> None:
    s = plane.catalog.scenario(("fail-401",), adapter="anthropic")
    plane.refresh()
    body = message(s.model.name, max_tokens=10)
    first = anthropic_error(await plane.post(MESSAGES_PATH, body, key=s.key), 502, "api_error")
    assert first["message"] == f'all keys of host "{s.host.name}" failed; last status 401'
    again = anthropic_error(await plane.post(MESSAGES_PATH, body, key=s.key), 503, "overloaded_error")
    assert again["message"] == f'no healthy keys for host "{s.host.name}"'


# ---------------------------------------------------------------------------------------- fallbacks


async def test_an_unavailable_model_falls_back_and_says_so(plane: LivePlane, fake: FakeUpstream) -> None:
    c = plane.catalog
    broken = c.scenario(("fail-503",))
    fallback = c.scenario()
    policy = c.build.policy(
        "falls", keys=(*broken.keys, *fallback.keys), fallbacks={broken.model.id: (fallback.model.name,)}
    )
    key = c.build.key("falls", account=c.account, policy=policy)[1]
    plane.refresh()
    response = await plane.post(CHAT_PATH, chat(broken.model.name), key=key)
    assert response.status_code == 200, response.text
    assert response.headers["x-relay-fallback-from"] == broken.model.name
    assert keys_called(fake) == [*values(broken), values(fallback)[0]]
    [event] = await plane.events()
    assert (event["model"], event["requested_model"], event["host"]) == (
        fallback.model.name,
        broken.model.name,
        fallback.host.name,
    )
    assert event["attempts"] == 2 and event["cost_nanos"] > 0


async def test_a_model_without_a_binding_goes_to_its_fallback_at_once(
    plane: LivePlane, fake: FakeUpstream
) -> None:
    c = plane.catalog
    unbound = c.build.model("unbound")
    fallback = c.scenario()
    policy = c.build.policy("reroutes", keys=fallback.keys, fallbacks={unbound.id: (fallback.model.name,)})
    key = c.build.key("reroutes", account=c.account, policy=policy)[1]
    plane.refresh()
    response = await plane.post(CHAT_PATH, chat("unbound"), key=key)
    assert response.status_code == 200 and response.headers["x-relay-fallback-from"] == "unbound"
    assert keys_called(fake) == [values(fallback)[0]]
    [event] = await plane.events()
    assert (event["model"], event["requested_model"], event["attempts"]) == (
        fallback.model.name,
        "unbound",
        1,
    )


# ---------------------------------------------------------------------------------------- translation


async def test_an_anthropic_request_to_an_openai_binding_is_translated(
    plane: LivePlane, fake: FakeUpstream
) -> None:
    response = await plane.post(MESSAGES_PATH, message(CHAT_MODEL), **{"anthropic-version": "2023-06-01"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["type"], body["role"], body["model"]) == ("message", "assistant", CHAT_MODEL)
    assert body["content"][0]["text"] == "Echo: hello there"
    sent = fake.requests()[-1]
    assert (sent["path"], sent["body"]["model"]) == (CHAT_PATH, CHAT_UPSTREAM)
    assert sent["body"]["messages"] == [{"role": "user", "content": "hello there"}]
    [event] = await plane.events()
    assert (event["inbound_shape"], event["adapter"], event["status"]) == ("anthropic", "openai", 200)
    assert event["cost_nanos"] > 0


async def test_embeddings_for_another_adapter_are_refused_with_the_plan_recorded(
    plane: LivePlane, fake: FakeUpstream
) -> None:
    """Embeddings are never translated (``unsupported_binding``); the refusal's event names the plan the
    request was routed to."""
    s = plane.catalog.scenario(adapter="anthropic")
    plane.refresh()
    response = await plane.post("/v1/embeddings", {"model": s.model.name, "input": "hi"}, key=s.key)
    openai_error(response, 400, "unsupported_binding")
    assert fake.stats()["requests"] == 0
    [event] = await plane.events()
    assert (event["error_kind"], event["status"], event["host"], event["adapter"]) == (
        "unsupported_binding",
        0,
        s.host.name,
        "anthropic",
    )


# ---------------------------------------------------------------------------------------- limits


async def test_a_spent_requests_limit_is_429_with_retry_after(plane: LivePlane, fake: FakeUpstream) -> None:
    s = plane.catalog.scenario(rules=({"meter": "requests", "limit": 1, "window": "1h"},))
    plane.refresh()
    assert (await plane.post(CHAT_PATH, chat(s.model.name), key=s.key)).status_code == 200
    refused = await plane.post(CHAT_PATH, chat(s.model.name), key=s.key)
    openai_error(refused, 429, "rate_limit_exceeded")
    assert int(refused.headers["retry-after"]) >= 1
    assert fake.stats()["requests"] == 1
    events = await plane.events()
    assert [(e["status"], e["error_kind"]) for e in events] == [(200, None), (0, "rate_limit_exceeded")]
