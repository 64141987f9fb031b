"""SPEC §7 over HTTP: Relay's errors in the caller's shape (OpenAI or Anthropic), 405 with ``Allow``,
unknown routes and the request body limit — against a real ``relay serve`` on SQLite and on Postgres +
Redis."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    Gateway,
)
from tests.integration.live.helpers import MESSAGE, assert_anthropic_error, assert_openai_error

# --- errors in the caller's shape --------------------------------------------------------------------

OPENAI_PATHS = [
    "/openai/v1/chat/completions",
    "/v1/chat/completions",
    "/openai/v1/responses",
    "/v1/responses",
    "/openai/v1/embeddings",
    "/v1/embeddings",
    "/v1/messages",
    "/v1/generate",
]


@pytest.mark.parametrize("path", OPENAI_PATHS)
def test_openai_shaped_errors(gateway: Gateway, fake: FakeUpstream, path: str) -> None:
    assert_openai_error(
        gateway.post(path, content=b'{"model": '), 400, "invalid_json", "invalid_request_error"
    )
    assert_openai_error(gateway.post(path, content=b"[1, 2]"), 400, "invalid_json")
    assert_openai_error(gateway.post(path, {"input": "x"}), 400, "missing_model", "invalid_request_error")
    assert_openai_error(gateway.post(path, {"model": ""}), 400, "missing_model")
    assert_openai_error(
        gateway.post(path, {"model": "no-such-model"}), 404, "model_not_found", "not_found_error"
    )
    assert_openai_error(
        gateway.post(path, {"model": CHAT_MODEL}, headers={}), 401, "unauthenticated", "authentication_error"
    )
    assert_openai_error(gateway.client.get(path), 405, "method_not_allowed")
    assert fake.stats()["requests"] == 0


def test_anthropic_shaped_errors(gateway: Gateway, fake: FakeUpstream) -> None:
    path = "/anthropic/v1/messages"
    assert_anthropic_error(gateway.post(path, content=b"{nope"), 400, "invalid_request_error")
    missing = assert_anthropic_error(gateway.post(path, {"messages": []}), 400, "invalid_request_error")
    assert "model" in missing["message"]
    assert_anthropic_error(gateway.post(path, {**MESSAGE, "model": "no-such-model"}), 404, "not_found_error")
    assert_anthropic_error(gateway.post(path, MESSAGE, headers={}), 401, "authentication_error")
    assert_anthropic_error(gateway.client.get(path), 405, "invalid_request_error")
    assert_anthropic_error(gateway.client.post("/anthropic/v1/nope", json={}), 404, "not_found_error")
    assert fake.stats()["requests"] == 0


@pytest.mark.parametrize("path", ["/openai/v1/chat/completions", "/anthropic/v1/messages"])
def test_method_not_allowed_says_which_method_is(gateway: Gateway, path: str) -> None:
    response = gateway.client.get(path)
    assert response.status_code == 405
    assert response.headers.get("allow") == "POST"


@pytest.mark.parametrize("path", ["/v1/nope", "/openai/v1/nope", "/", "/v2/chat/completions"])
def test_unknown_route_is_404(gateway: Gateway, path: str) -> None:
    assert_openai_error(gateway.client.post(path, json={}), 404, "not_found", "not_found_error")
    assert_openai_error(gateway.client.get(path), 404, "not_found")


def test_request_body_limit(relay_factory: Any, tmp_path: Any, fake_upstream: FakeUpstream) -> None:
    relay = relay_factory(f"sqlite:///{tmp_path / 'small.db'}", {"RELAY_MAX_REQUEST_BYTES": "2048"})
    big = json.dumps({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "x" * 3000}]}).encode()
    fits = json.dumps({"model": CHAT_MODEL, "messages": [{"role": "user", "content": "x" * 1500}]}).encode()
    headers = {"content-type": "application/json", "authorization": "Bearer sk-relay-unknown"}
    for path in ("/openai/v1/chat/completions", "/v1/generate"):
        error = assert_openai_error(
            relay.inference.post(path, content=big, headers=headers), 413, "payload_too_large"
        )
        assert error["type"] == "request_too_large"
        # without a Content-Length (chunked upload) the limit holds while reading
        chunked = relay.inference.post(path, content=iter([big[:1000], big[1000:]]), headers=headers)
        assert "content-length" not in chunked.request.headers
        assert_openai_error(chunked, 413, "payload_too_large")
        # a body under the limit gets past the size check (and fails later, on the unknown key)
        assert_openai_error(relay.inference.post(path, content=fits, headers=headers), 401, "unauthenticated")
    anthropic = relay.inference.post("/anthropic/v1/messages", content=big, headers=headers)
    assert_anthropic_error(anthropic, 413, "request_too_large")
