"""Failure injection: key-name patterns, runtime key rules, per-request overrides and their precedence."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream

from .helpers import ANTHROPIC_AUTH, OPENAI_AUTH, parse_sse

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "c", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def chat(
    client: httpx.Client,
    key: str = "sk-test",
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return client.post(
        "/v1/chat/completions",
        json=body or CHAT,
        headers={"authorization": f"Bearer {key}", **(headers or {})},
    )


@pytest.mark.parametrize(
    ("key", "status", "error_type"),
    [
        ("fail-401-x", 401, "invalid_request_error"),
        ("fail-500-a", 500, "server_error"),
        ("fail-503", 503, "server_error"),
    ],
)
def test_failing_key_openai_shape(client: httpx.Client, key: str, status: int, error_type: str) -> None:
    response = chat(client, key)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == error_type and error["param"] is None
    assert "retry-after" not in response.headers


def test_failing_key_anthropic_shape(client: httpx.Client) -> None:
    headers = {**ANTHROPIC_AUTH, "x-api-key": "fail-500-b"}
    response = client.post("/v1/messages", json=MESSAGES, headers=headers)
    assert response.status_code == 500
    assert response.json() == {
        "type": "error",
        "error": {"type": "api_error", "message": response.json()["error"]["message"]},
    }
    headers["x-api-key"] = "fail-429-z"
    limited = client.post("/v1/messages", json=MESSAGES, headers=headers)
    assert limited.status_code == 429 and limited.json()["error"]["type"] == "rate_limit_error"


def test_429_key_retry_after_default_and_explicit(client: httpx.Client) -> None:
    default = chat(client, "fail-429-b")
    assert default.status_code == 429
    assert default.headers["retry-after"] == "1"
    assert default.json()["error"]["code"] == "rate_limit_exceeded"
    explicit = chat(client, "fail-429-ra30-k")
    assert explicit.status_code == 429
    assert explicit.headers["retry-after"] == "30"


def test_fail_conn_key_is_a_connection_error(client: httpx.Client, fake: FakeUpstream) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        chat(client, "fail-conn-1")
    assert chat(client).status_code == 200  # the client recovers with a new connection
    assert fake.stats()["by_status"] == {"0": 1, "200": 1}


def test_runtime_key_rules(client: httpx.Client, fake: FakeUpstream) -> None:
    fake.configure(key_rules=[{"pattern": "team-b-*", "status": 503, "retry_after": 2}])
    response = chat(client, "team-b-7")
    assert response.status_code == 503 and response.headers["retry-after"] == "2"
    assert chat(client, "team-a-7").status_code == 200
    fake.configure(key_rules=[{"pattern": "drop-*", "disconnect": True}])
    with pytest.raises(httpx.RemoteProtocolError):
        chat(client, "drop-me")


def test_body_override(client: httpx.Client) -> None:
    response = chat(client, body={**CHAT, "fake": {"status": 503, "retry_after": 3}})
    assert response.status_code == 503 and response.headers["retry-after"] == "3"
    with pytest.raises(httpx.RemoteProtocolError):
        chat(client, body={**CHAT, "fake": {"disconnect": True}})


def test_header_override(client: httpx.Client) -> None:
    response = chat(client, headers={"x-fake-status": "429", "x-fake-retry-after": "7"})
    assert response.status_code == 429 and response.headers["retry-after"] == "7"
    assert chat(client, headers={"x-fake-status": "502"}).status_code == 502


def test_precedence_request_over_key_over_global(client: httpx.Client, fake: FakeUpstream) -> None:
    fake.configure(key_rules=[{"pattern": "fail-*", "status": 418}])
    assert chat(client, "fail-500-x").status_code == 418  # runtime rule beats the naming convention
    fake.reset()
    assert chat(client, "fail-500-x", body={**CHAT, "fake": {"status": 503}}).status_code == 503
    assert chat(client, "fail-500-x", body={**CHAT, "fake": {"status": 200}}).status_code == 200
    both = chat(client, body={**CHAT, "fake": {"status": 503}}, headers={"x-fake-status": "504"})
    assert both.status_code == 504  # headers beat the body field
    keyed = chat(client, "fail-429-ra30-k", body={**CHAT, "fake": {"retry_after": 5}})
    assert keyed.status_code == 429 and keyed.headers["retry-after"] == "5"


def test_bad_override_is_400(client: httpx.Client) -> None:
    assert chat(client, body={**CHAT, "fake": {"stauts": 500}}).status_code == 400
    assert chat(client, headers={"x-fake-latency-ms": "soon"}).status_code == 400


def test_fail_after_chunks_drops_the_stream(client: httpx.Client) -> None:
    body = {**CHAT, "stream": True, "fake": {"fail_after_chunks": 2}}
    received: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.stream("POST", "/v1/chat/completions", json=body, headers=OPENAI_AUTH) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line:
                received.append(line)
    assert len(received) == 2
    events = parse_sse("\n\n".join(received) + "\n\n")
    assert events[0][1]["choices"][0]["delta"]["role"] == "assistant"


def test_global_latency(client: httpx.Client, fake: FakeUpstream) -> None:
    fake.configure(latency_ms=150, jitter_ms=20)
    started = time.perf_counter()
    assert chat(client).status_code == 200
    assert time.perf_counter() - started >= 0.15
    started = time.perf_counter()
    assert chat(client, "fail-500-l").status_code == 500  # failures are delayed too
    assert time.perf_counter() - started >= 0.15


def test_per_request_latency(client: httpx.Client) -> None:
    started = time.perf_counter()
    chat(client, headers={"x-fake-latency-ms": "120"})
    assert time.perf_counter() - started >= 0.12
    started = time.perf_counter()
    chat(client, body={**CHAT, "fake": {"latency_ms": 100}})
    assert time.perf_counter() - started >= 0.1
