"""Shared by the live suite: Relay's error bodies in each caller shape (SPEC §7), what the fake upstream
received, and the short request builders several modules use."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import HOST_ANTHROPIC, HOST_OPENAI, MESSAGES_MODEL, Gateway, Scenario


def assert_openai_error(
    response: httpx.Response, status: int, code: str, kind: str | None = None
) -> dict[str, Any]:
    """``{"error": {"type", "code", "message"}}`` with this status and code; returns the error object."""
    assert response.status_code == status, response.text
    assert response.headers["x-relay-request-id"]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"type", "code", "message"}, error
    assert error["code"] == code and error["message"], error
    if kind is not None:
        assert error["type"] == kind, error
    return dict(error)


def assert_anthropic_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` with this status; returns the error object."""
    assert response.status_code == status, response.text
    assert response.headers["x-relay-request-id"]
    body = response.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind and body["error"]["message"], body
    return dict(body["error"])


def last_upstream(fake: FakeUpstream) -> dict[str, Any]:
    """The last request the fake upstream received (path, headers, body, key, status)."""
    recorded = fake.requests(1)
    assert recorded, "the fake upstream received nothing"
    return recorded[-1]


def keys_called(fake: FakeUpstream) -> list[str]:
    """The upstream key of every request the fake received since its reset, in order."""
    return [r["key"] for r in fake.requests(500)]


MAIN_KEYS = {host: f"{host}-k1" for host in (HOST_OPENAI, HOST_ANTHROPIC)}


def messages(
    gateway: Gateway, model: str, key: str | None = None, path: str = "/anthropic/v1/messages"
) -> httpx.Response:
    body = {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": "hello there"}]}
    return gateway.post(path, body, key=key)


def chat(gateway: Gateway, s: Scenario, **extra: Any) -> httpx.Response:
    body = {"model": s.model, "messages": [{"role": "user", "content": "hello there"}], **extra}
    return gateway.post("/v1/chat/completions", body, key=s.key)


def ok(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Echo: hello there"


MESSAGE = {"model": MESSAGES_MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


def assert_relay_key_not_forwarded(received: dict[str, Any], relay_key: str) -> None:
    assert relay_key not in json.dumps(received["headers"])
    assert relay_key not in json.dumps(received["body"])
