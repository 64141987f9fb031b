"""SPEC §7 over HTTP: what reaches the upstream (the host key, the Anthropic version and beta headers, a
length for chunked uploads) and what never does (the relay key, the caller's other credentials) —
against a real ``relay serve`` on SQLite and on Postgres + Redis."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    CHAT_UPSTREAM,
    HOST_ANTHROPIC,
    HOST_OPENAI,
    Gateway,
)
from tests.integration.live.helpers import MESSAGE, assert_relay_key_not_forwarded, last_upstream

# --- what reaches the upstream -----------------------------------------------------------------------

CALLER_EXTRAS = {
    "cookie": "session=caller-cookie-secret",
    "proxy-authorization": "Basic Y2FsbGVyOnNlY3JldA==",
    "keep-alive": "timeout=5",
    "te": "trailers",
    "connection": "keep-alive, x-hop-marker",
    "x-hop-marker": "hop-value",
    "openai-organization": "org-caller",
    "openai-project": "proj-caller",
    "x-stainless-os": "Caller",
    "user-agent": "caller-agent/1.0",
}
NEVER_UPSTREAM = (
    "cookie",
    "proxy-authorization",
    "keep-alive",
    "te",
    "x-hop-marker",
    "openai-organization",
    "openai-project",
    "x-stainless-os",
)


def test_openai_path_forwards_the_host_key_and_nothing_of_the_callers(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    headers = {**gateway.auth(None), "x-api-key": "caller-x-api-key-value", **CALLER_EXTRAS}
    response = gateway.client.post(
        "/openai/v1/chat/completions",
        json={"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers=headers,
    )
    assert response.status_code == 200, response.text
    received = last_upstream(fake)
    upstream_headers = received["headers"]
    assert upstream_headers["authorization"] == f"Bearer {gateway.host_key_values[HOST_OPENAI]}"
    assert received["key"] == gateway.host_key_values[HOST_OPENAI]
    assert "x-api-key" not in upstream_headers
    for name in NEVER_UPSTREAM:
        assert name not in upstream_headers, name
    assert upstream_headers.get("user-agent") != "caller-agent/1.0"
    assert "keep-alive, x-hop-marker" not in upstream_headers.values()
    assert_relay_key_not_forwarded(received, gateway.key)


def test_relay_key_in_x_api_key_on_an_openai_path_is_not_forwarded(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    response = gateway.post(
        "/v1/chat/completions",
        {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": gateway.key},
    )
    assert response.status_code == 200, response.text
    received = last_upstream(fake)
    assert "x-api-key" not in received["headers"]
    assert received["headers"]["authorization"] == f"Bearer {gateway.host_key_values[HOST_OPENAI]}"
    assert_relay_key_not_forwarded(received, gateway.key)


def test_anthropic_path_forwards_version_and_beta_and_the_host_key(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    headers = {
        "x-api-key": gateway.key,
        "anthropic-version": "2023-01-01",
        "anthropic-beta": "tools-2024-04-04",
        **CALLER_EXTRAS,
    }
    response = gateway.post("/anthropic/v1/messages", MESSAGE, headers=headers)
    assert response.status_code == 200, response.text
    received = last_upstream(fake)
    upstream_headers = received["headers"]
    assert upstream_headers["x-api-key"] == gateway.host_key_values[HOST_ANTHROPIC]
    assert upstream_headers["anthropic-version"] == "2023-01-01"
    assert upstream_headers["anthropic-beta"] == "tools-2024-04-04"
    assert "authorization" not in upstream_headers
    for name in NEVER_UPSTREAM:
        assert name not in upstream_headers, name
    assert_relay_key_not_forwarded(received, gateway.key)


def test_repeated_anthropic_beta_headers_are_all_forwarded(gateway: Gateway, fake: FakeUpstream) -> None:
    """Regression: only the last of several anthropic-beta headers reached the upstream."""
    headers = [
        ("x-api-key", gateway.key),
        ("anthropic-beta", "beta-one"),
        ("anthropic-beta", "beta-two"),
        ("content-type", "application/json"),
    ]
    content = json.dumps(MESSAGE).encode()
    response = gateway.client.post("/anthropic/v1/messages", content=content, headers=headers)
    assert response.status_code == 200, response.text
    forwarded = last_upstream(fake)["headers"]["anthropic-beta"]
    assert [b.strip() for b in forwarded.split(",")] == ["beta-one", "beta-two"]


def test_chunked_upload_goes_upstream_with_a_length(gateway: Gateway, fake: FakeUpstream) -> None:
    parts = [f'{{"model": "{CHAT_MODEL}", '.encode(), b'"messages": [{"role": "user", "content": "hi"}]}']
    response = gateway.client.post(
        "/v1/chat/completions",
        content=iter(parts),
        headers={**gateway.auth(None), "content-type": "application/json", "te": "trailers"},
    )
    assert response.status_code == 200, response.text
    assert response.request.headers["transfer-encoding"] == "chunked"
    received = last_upstream(fake)
    assert "transfer-encoding" not in received["headers"] and "te" not in received["headers"]
    assert int(received["headers"]["content-length"]) > 0
    assert received["body"] == {"model": CHAT_UPSTREAM, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("path", ["/anthropic/v1/messages", "/v1/messages"])
def test_anthropic_version_defaults_when_absent(gateway: Gateway, fake: FakeUpstream, path: str) -> None:
    response = gateway.post(path, MESSAGE)  # Authorization: Bearer <relay key>
    assert response.status_code == 200, response.text
    upstream_headers = last_upstream(fake)["headers"]
    assert upstream_headers["anthropic-version"] == "2023-06-01"
    assert "anthropic-beta" not in upstream_headers
    assert "authorization" not in upstream_headers
    assert upstream_headers["x-api-key"] == gateway.host_key_values[HOST_ANTHROPIC]
