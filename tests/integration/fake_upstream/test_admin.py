"""Introspection and control endpoints, and the provider-like validation errors."""

from __future__ import annotations

import httpx

from tests.fixtures.fake_upstream import FakeUpstream, start_fake_upstream, stop_process

from .helpers import ANTHROPIC_AUTH, OPENAI_AUTH

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_config_get_set_and_reset(fake: FakeUpstream, client: httpx.Client) -> None:
    assert fake.config() == {
        "latency_ms": 0.0,
        "jitter_ms": 0.0,
        "chunk_delay_ms": 0.0,
        "key_rules": [],
        "batch_phase_ms": 0.0,
        "batch_expire_ms": None,
        "batch_refuse_status": None,
        "batch_poll_status": None,
    }
    updated = fake.configure(latency_ms=5, key_rules=[{"pattern": "x*", "status": 500}])
    assert updated["latency_ms"] == 5.0
    assert updated["key_rules"] == [
        {"pattern": "x*", "status": 500, "retry_after": None, "disconnect": False, "latency_ms": None}
    ]
    assert client.get("/__config").json() == updated
    assert client.post("/__config", json={"latency": 5}).status_code == 400
    assert client.post("/__config", json={"latency_ms": -1}).status_code == 400
    assert client.post("/__config", content=b"{").status_code == 400
    assert client.post("/__config", json={"batch_refuse_status": 42}).status_code == 400
    assert client.post("/__config", json={"batch_expire_ms": -1}).status_code == 400
    fake.reset()
    assert fake.config()["key_rules"] == []


def test_stats_and_requests_log(fake: FakeUpstream, client: httpx.Client) -> None:
    client.post("/v1/chat/completions", json=CHAT, headers={**OPENAI_AUTH, "x-custom": "Yes"})
    client.post("/v1/messages", json={**CHAT, "max_tokens": 5}, headers=ANTHROPIC_AUTH)
    client.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer fail-500-q"})
    assert fake.stats() == {
        "requests": 3,
        "by_path": {"/v1/chat/completions": 2, "/v1/messages": 1},
        "by_key": {"sk-test": 1, "sk-ant-test": 1, "fail-500-q": 1},
        "by_status": {"200": 2, "500": 1},
    }
    log = fake.requests()
    assert [r["path"] for r in log] == ["/v1/chat/completions", "/v1/messages", "/v1/chat/completions"]
    first = log[0]
    assert first["headers"]["x-custom"] == "Yes"
    assert first["headers"]["authorization"] == "Bearer sk-test"
    assert first["body"] == CHAT
    assert first["key"] == "sk-test"
    assert first["method"] == "POST" and first["status"] == 200
    assert isinstance(first["ts"], float)
    assert all(r["ts"] <= r["answered"] for r in log)  # in flight from arrival to answer
    assert log[1]["headers"]["anthropic-version"] == "2023-06-01"
    assert log[2]["status"] == 500
    assert [r["key"] for r in fake.requests(limit=1)] == ["fail-500-q"]
    fake.reset()
    assert fake.stats()["requests"] == 0
    assert fake.requests() == []


def test_admin_calls_are_not_recorded(fake: FakeUpstream) -> None:
    fake.stats()
    fake.config()
    assert fake.stats()["requests"] == 0


def test_missing_key_is_401_in_provider_shape(client: httpx.Client) -> None:
    openai_error = client.post("/v1/chat/completions", json=CHAT)
    assert openai_error.status_code == 401
    assert openai_error.json()["error"]["type"] == "invalid_request_error"
    anthropic_error = client.post("/v1/messages", json=CHAT, headers={"anthropic-version": "2023-06-01"})
    assert anthropic_error.status_code == 401
    assert anthropic_error.json()["type"] == "error"
    assert anthropic_error.json()["error"]["type"] == "authentication_error"
    # OpenAI paths do not read x-api-key
    assert client.post("/v1/responses", json=CHAT, headers={"x-api-key": "k"}).status_code == 401


def test_anthropic_version_required(client: httpx.Client) -> None:
    response = client.post("/v1/messages", json=CHAT, headers={"x-api-key": "k"})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
    }


def test_bad_json_and_missing_model(client: httpx.Client, fake: FakeUpstream) -> None:
    bad = client.post("/v1/chat/completions", content=b'{"model": ', headers=OPENAI_AUTH)
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_json"
    assert fake.requests(1)[0]["body"] == '{"model": '
    bad_anthropic = client.post("/v1/messages", content=b"[1]", headers=ANTHROPIC_AUTH)
    assert bad_anthropic.status_code == 400 and bad_anthropic.json()["type"] == "error"
    missing = client.post("/v1/embeddings", json={"input": "x"}, headers=OPENAI_AUTH)
    assert missing.status_code == 400
    assert missing.json()["error"]["code"] == "missing_model"


def test_unknown_path_and_method(client: httpx.Client) -> None:
    assert client.post("/v1/nope", json=CHAT, headers=OPENAI_AUTH).status_code == 404
    assert client.get("/v1/chat/completions", headers=OPENAI_AUTH).status_code == 405
    assert client.get("/health").json() == {"status": "ok"}


def test_cli_flags_set_the_start_config() -> None:
    upstream = start_fake_upstream("--latency-ms", "3", "--key-rule", "blocked-*=403")
    try:
        assert upstream.config()["latency_ms"] == 3.0
        response = httpx.post(
            upstream.url("/v1/chat/completions"), json=CHAT, headers={"authorization": "Bearer blocked-1"}
        )
        assert response.status_code == 403
        upstream.configure(latency_ms=0)
        upstream.reset()
        assert upstream.config()["latency_ms"] == 3.0  # reset returns to the start values
    finally:
        upstream.close()
        assert upstream.process is not None
        stop_process(upstream.process)
