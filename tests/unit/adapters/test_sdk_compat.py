"""The official SDKs, talking to an in-memory transport (no sockets), accept what the adapters produce.

Importing the SDKs costs seconds; every SDK check of this package lives in this one module.
"""

from __future__ import annotations

import httpx2
import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from relay.adapters import CanonicalStream, StreamTap  # noqa: E402
from relay.http.errors import error_body  # noqa: E402

from .helpers import BODIES, byte_chunks, render_stream  # noqa: E402


def openai_client(status: int, content: bytes, content_type: str = "application/json") -> object:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=content, headers={"content-type": content_type})

    return openai.OpenAI(
        api_key="k",
        base_url="http://relay.test/openai/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def anthropic_client(status: int, content: bytes) -> object:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, content=content, headers={"content-type": "application/json"})

    return anthropic.Anthropic(
        api_key="k",
        base_url="http://relay.test/anthropic",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


@pytest.mark.parametrize(
    ("status", "code", "exc"),
    [
        (400, "invalid_json", "BadRequestError"),
        (401, "unauthenticated", "AuthenticationError"),
        (403, "model_not_allowed", "PermissionDeniedError"),
        (404, "model_not_found", "NotFoundError"),
        (429, "rate_limit_exceeded", "RateLimitError"),
        (502, "upstream_unavailable", "InternalServerError"),
        (503, "no_healthy_keys", "InternalServerError"),
    ],
)
def test_openai_sdk_reads_relay_errors(status: int, code: str, exc: str) -> None:
    client = openai_client(status, error_body("openai", status=status, code=code, message="relay says no"))
    with pytest.raises(getattr(openai, exc)) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])  # type: ignore[attr-defined]
    assert info.value.status_code == status
    assert info.value.code == code
    assert info.value.type
    assert "relay says no" in info.value.message


@pytest.mark.parametrize(
    ("status", "exc", "kind"),
    [
        (400, "BadRequestError", "invalid_request_error"),
        (401, "AuthenticationError", "authentication_error"),
        (403, "PermissionDeniedError", "permission_error"),
        (404, "NotFoundError", "not_found_error"),
        (413, "APIStatusError", "request_too_large"),
        (429, "RateLimitError", "rate_limit_error"),
        (502, "InternalServerError", "api_error"),
        (503, "APIStatusError", "overloaded_error"),
    ],
)
def test_anthropic_sdk_reads_relay_errors(status: int, exc: str, kind: str) -> None:
    client = anthropic_client(
        status, error_body("anthropic", status=status, code="c", message="relay says no")
    )
    with pytest.raises(getattr(anthropic, exc)) as info:
        client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])  # type: ignore[attr-defined]
    assert info.value.status_code == status
    assert info.value.body["error"] == {"type": kind, "message": "relay says no"}
    assert getattr(info.value, "type", kind) == kind
    assert "relay says no" in str(info.value)


@pytest.mark.usefixtures("deterministic")
def test_openai_sdk_reads_the_stripped_stream() -> None:
    upstream = render_stream(
        "openai", {**BODIES["openai"], "stream": True, "stream_options": {"include_usage": True}}
    )
    tap = StreamTap("openai", strip_usage_chunk=True)
    out = b"".join(tap.feed(c) for c in byte_chunks(upstream)) + tap.finish()
    client = openai_client(200, out, "text/event-stream")
    chunks = list(
        client.chat.completions.create(  # type: ignore[attr-defined]
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
    )
    assert all(c.usage is None and c.choices for c in chunks)
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks) == "Echo: the quick brown fox jumps over it"
    )
    assert tap.usage.output_tokens == 8


def test_canonical_stream_is_plain_sse() -> None:
    stream = CanonicalStream("anthropic")
    out = stream.feed(render_stream("anthropic", {**BODIES["anthropic"], "stream": True})) + stream.finish()
    decoder = openai._streaming.SSEDecoder()
    events = list(decoder.iter_bytes(iter([out])))
    assert [e.event for e in events][-1] == "done"
    assert {e.event for e in events} == {"delta", "done"}
