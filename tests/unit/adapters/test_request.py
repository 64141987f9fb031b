from __future__ import annotations

from typing import Any

import orjson
import pytest

from relay.adapters import UPSTREAM_PATHS, build_upstream_request

SHAPES = ["openai", "openai_responses", "anthropic", "embeddings"]
RELAY_SET = ("authorization", "x-api-key", "accept-encoding")

FORBIDDEN = {
    # the caller's credentials
    "authorization": "Bearer sk-relay-caller",
    "x-api-key": "sk-relay-caller",
    "api-key": "caller-azure-key",
    "cookie": "relay_session=abc",
    "proxy-authorization": "Basic abc",
    # account scoping of the caller's own provider account
    "openai-organization": "org-caller",
    "openai-project": "proj-caller",
    # hop-by-hop
    "connection": "keep-alive, x-custom",
    "keep-alive": "timeout=5",
    "proxy-connection": "keep-alive",
    "te": "trailers",
    "trailer": "x-checksum",
    "transfer-encoding": "chunked",
    "upgrade": "h2c",
    # describe the caller's connection and body, not ours
    "host": "relay.example:8080",
    "content-length": "12345",
    # identity, telemetry, test knobs
    "user-agent": "OpenAI/Python 1.0",
    "x-stainless-lang": "python",
    "x-fake-status": "500",
    "x-forwarded-for": "10.0.0.1",
    "accept-encoding": "br, zstd",
}


def build(
    shape: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    stream: bool = False,
    upstream_model: str = "up-model",
) -> Any:
    return build_upstream_request(
        shape,
        body if body is not None else {"model": "alias", "stream": stream},
        upstream_model=upstream_model,
        api_key="sk-upstream",
        caller_headers=headers or {},
        stream=stream,
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_path_per_shape(shape: str) -> None:
    assert build(shape).path == UPSTREAM_PATHS[shape]
    assert UPSTREAM_PATHS == {
        "openai": "/v1/chat/completions",
        "openai_responses": "/v1/responses",
        "anthropic": "/v1/messages",
        "embeddings": "/v1/embeddings",
    }


@pytest.mark.parametrize("shape", ["openai", "openai_responses", "embeddings"])
def test_openai_family_uses_bearer_auth(shape: str) -> None:
    headers = build(shape).headers
    assert headers["authorization"] == "Bearer sk-upstream"
    assert "x-api-key" not in headers


def test_anthropic_uses_x_api_key_and_default_version() -> None:
    headers = build("anthropic").headers
    assert headers["x-api-key"] == "sk-upstream"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert "anthropic-beta" not in headers


def test_anthropic_forwards_callers_version_and_beta_whatever_the_case() -> None:
    headers = build(
        "anthropic",
        headers={"Anthropic-Version": "2024-10-22", "ANTHROPIC-BETA": "prompt-caching-2024-07-31,tools-2024"},
    ).headers
    assert headers["anthropic-version"] == "2024-10-22"
    assert headers["anthropic-beta"] == "prompt-caching-2024-07-31,tools-2024"


def test_anthropic_headers_are_not_forwarded_to_openai_shapes() -> None:
    headers = build("openai", headers={"anthropic-version": "2024-10-22", "anthropic-beta": "x"}).headers
    assert not any(name.startswith("anthropic-") for name in headers)


def test_header_values_with_line_breaks_are_dropped() -> None:
    headers = build("anthropic", headers={"anthropic-beta": "x\r\nx-api-key: stolen"}).headers
    assert "anthropic-beta" not in headers


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_forbidden_caller_header_is_never_forwarded(shape: str, name: str) -> None:
    for spelled in (name, name.title(), name.upper()):
        headers = build(shape, headers={spelled: FORBIDDEN[name]}).headers
        lowered = {k.lower(): v for k, v in headers.items()}
        assert FORBIDDEN[name] not in lowered.values()
        if name not in RELAY_SET:
            assert name not in lowered
        elif name in lowered:  # a header Relay sets itself: Relay's value, never the caller's
            assert lowered[name] in ("Bearer sk-upstream", "sk-upstream", "identity")


@pytest.mark.parametrize("shape", SHAPES)
def test_exact_header_set(shape: str) -> None:
    everything = {**FORBIDDEN, "anthropic-version": "2023-06-01", "anthropic-beta": "b1"}
    headers = build(shape, headers=everything).headers
    expected = {"content-type", "accept", "accept-encoding"}
    expected |= (
        {"x-api-key", "anthropic-version", "anthropic-beta"} if shape == "anthropic" else {"authorization"}
    )
    assert set(headers) == expected
    assert headers["content-type"] == "application/json"
    assert headers["accept"] == "application/json"
    assert headers["accept-encoding"] == "identity"


def test_stream_accepts_event_stream() -> None:
    assert build("anthropic", stream=True).headers["accept"] == "text/event-stream"


@pytest.mark.parametrize("shape", SHAPES)
def test_model_rewrite_leaves_every_other_field_equal(shape: str) -> None:
    body = {
        "model": "my-alias",
        "messages": [{"role": "user", "content": [{"type": "text", "text": 'héllo \u2028 "q"'}]}],
        "temperature": 0.7,
        "top_p": 1.0,
        "max_tokens": 12,
        "seed": 9007199254740993,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "metadata": {"k": None, "nested": [1, 2.5, True, False, None]},
        "fake": {"latency_ms": 5},
        "unknown_future_field": {"x": [{}]},
    }
    original = orjson.loads(orjson.dumps(body))
    request = build(shape, body=body)
    sent = orjson.loads(request.body)
    assert sent.pop("model") == "up-model"
    original.pop("model")
    assert sent == original
    assert body["model"] == "my-alias"  # the caller's dict is not mutated


def test_openai_stream_gets_include_usage_and_strip_flag() -> None:
    body = {"model": "a", "messages": [], "stream": True}
    request = build("openai", body=body, stream=True)
    assert orjson.loads(request.body)["stream_options"] == {"include_usage": True}
    assert request.strip_usage_chunk is True
    assert "stream_options" not in body


def test_openai_stream_keeps_other_stream_options() -> None:
    body = {
        "model": "a",
        "stream": True,
        "stream_options": {"include_usage": False, "include_obfuscation": False},
    }
    request = build("openai", body=body, stream=True)
    assert orjson.loads(request.body)["stream_options"] == {
        "include_usage": True,
        "include_obfuscation": False,
    }
    assert request.strip_usage_chunk is True
    assert body["stream_options"] == {"include_usage": False, "include_obfuscation": False}


def test_openai_stream_where_caller_asked_for_usage_is_untouched() -> None:
    body = {"model": "a", "stream": True, "stream_options": {"include_usage": True}}
    request = build("openai", body=body, stream=True)
    assert orjson.loads(request.body)["stream_options"] == {"include_usage": True}
    assert request.strip_usage_chunk is False


def test_malformed_stream_options_are_left_for_the_upstream() -> None:
    request = build("openai", body={"model": "a", "stream": True, "stream_options": "yes"}, stream=True)
    assert orjson.loads(request.body)["stream_options"] == "yes"
    assert request.strip_usage_chunk is False


@pytest.mark.parametrize("shape", ["openai_responses", "anthropic"])
def test_other_streams_are_not_changed(shape: str) -> None:
    request = build(shape, body={"model": "a", "stream": True}, stream=True)
    assert orjson.loads(request.body) == {"model": "up-model", "stream": True}
    assert request.strip_usage_chunk is False


def test_non_stream_chat_is_not_changed() -> None:
    request = build("openai", body={"model": "a", "messages": []})
    assert orjson.loads(request.body) == {"model": "up-model", "messages": []}
    assert request.strip_usage_chunk is False


@pytest.mark.parametrize("shape", ["canonical", "nope"])
def test_untranslated_shapes_are_refused(shape: str) -> None:
    with pytest.raises(ValueError):
        build(shape)


class MultiHeaders:
    """A Mapping-like view that yields repeated headers, as Starlette's ``Headers.items()`` does."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        self.pairs = pairs

    def items(self) -> list[tuple[str, str]]:
        return self.pairs


def test_repeated_anthropic_headers() -> None:
    caller = MultiHeaders(
        [
            ("anthropic-beta", "a-1"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "b-2"),
            ("anthropic-version", "1999-01-01"),
        ]
    )
    headers = build("anthropic", headers=caller).headers  # type: ignore[arg-type]
    assert headers["anthropic-beta"] == "a-1,b-2"
    assert headers["anthropic-version"] == "2023-06-01"
