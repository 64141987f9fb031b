"""SPEC §7 over HTTP: the request body limit (``RELAY_MAX_REQUEST_BYTES``, with and without a
Content-Length) against a real ``relay serve`` started with that setting. Relay's other errors in the
caller's shape, 405 with ``Allow`` and unknown routes are tested in-process:
``tests/unit/inference/test_app.py``."""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import CHAT_MODEL
from tests.integration.live.helpers import assert_anthropic_error, assert_openai_error


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
