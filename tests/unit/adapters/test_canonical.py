from __future__ import annotations

from typing import Any

import orjson
import pytest

from relay.adapters import (
    DEFAULT_ANTHROPIC_MAX_TOKENS,
    AdapterError,
    build_upstream_request,
    canonical_from_response,
    canonical_to,
)
from relay.fake_upstream import complete

from .helpers import render

CANONICAL: dict[str, Any] = {
    "model": "relay-model",
    "system": "be brief",
    "messages": [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "the quick brown fox"},
    ],
    "max_tokens": 50,
    "temperature": 0.2,
}
API = {"openai": "chat", "anthropic": "messages", "openai_responses": "responses"}


def test_to_openai_chat() -> None:
    assert canonical_to("openai", CANONICAL) == {
        "model": "relay-model",
        "messages": [{"role": "system", "content": "be brief"}, *CANONICAL["messages"]],
        "max_completion_tokens": 50,
        "temperature": 0.2,
    }


def test_to_anthropic() -> None:
    assert canonical_to("anthropic", CANONICAL) == {
        "model": "relay-model",
        "system": "be brief",
        "messages": CANONICAL["messages"],
        "max_tokens": 50,
        "temperature": 0.2,
    }


def test_to_responses() -> None:
    assert canonical_to("openai_responses", CANONICAL) == {
        "model": "relay-model",
        "instructions": "be brief",
        "input": CANONICAL["messages"],
        "max_output_tokens": 50,
        "temperature": 0.2,
        "store": False,
    }


def test_minimal_request_and_anthropic_default_max_tokens() -> None:
    minimal = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert canonical_to("openai", minimal) == minimal
    assert canonical_to("anthropic", minimal) == {**minimal, "max_tokens": DEFAULT_ANTHROPIC_MAX_TOKENS}
    assert DEFAULT_ANTHROPIC_MAX_TOKENS == 1024
    assert canonical_to("openai_responses", minimal) == {
        "model": "m",
        "input": minimal["messages"],
        "store": False,
    }


def test_stream_flags() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    chat = canonical_to("openai", body)
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert canonical_to("anthropic", body)["stream"] is True
    assert canonical_to("openai_responses", body)["stream"] is True
    request = build_upstream_request(
        "openai", chat, upstream_model="u", api_key="k", caller_headers={}, stream=True
    )
    assert request.strip_usage_chunk is False  # nothing to hide: the canonical translator wants the usage


def test_translation_does_not_mutate_or_alias_input() -> None:
    body = orjson.loads(orjson.dumps(CANONICAL))
    for adapter in API:
        out = canonical_to(adapter, body)
        (out.get("messages") or out["input"])[-1]["content"] = "changed"
    assert body == CANONICAL


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"messages": None}, "'messages'"),
        ({"messages": []}, "'messages'"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}, "messages[0].content"),
        ({"system": ["x"]}, "'system'"),
        ({"max_tokens": 0}, "'max_tokens'"),
        ({"max_tokens": "5"}, "'max_tokens'"),
        ({"max_tokens": True}, "'max_tokens'"),
        ({"temperature": "hot"}, "'temperature'"),
        ({"temperature": -1}, "'temperature'"),
        ({"stream": "yes"}, "'stream'"),
    ],
)
def test_invalid_canonical_requests(patch: dict[str, Any], fragment: str) -> None:
    with pytest.raises(AdapterError) as info:
        canonical_to("anthropic", {**CANONICAL, **patch})
    assert info.value.code == "invalid_request"
    assert fragment in info.value.message


def test_missing_model_and_unknown_adapter() -> None:
    with pytest.raises(AdapterError) as info:
        canonical_to("openai", {"messages": [{"role": "user", "content": "x"}]})
    assert info.value.code == "missing_model"
    with pytest.raises(ValueError):
        canonical_to("embeddings", CANONICAL)
    with pytest.raises(ValueError):
        canonical_from_response("gemini", {})


def test_unknown_fields_are_ignored() -> None:
    assert "top_k" not in canonical_to("anthropic", {**CANONICAL, "top_k": 3})


@pytest.mark.parametrize("adapter", ["openai", "anthropic", "openai_responses"])
@pytest.mark.parametrize(("max_tokens", "stop"), [(None, "end_turn"), (2, "max_tokens")])
def test_round_trip_through_the_fake(adapter: str, max_tokens: int | None, stop: str) -> None:
    canonical = (
        {**CANONICAL, "max_tokens": max_tokens}
        if max_tokens
        else {k: v for k, v in CANONICAL.items() if k != "max_tokens"}
    )
    upstream_body = canonical_to(adapter, canonical)
    expected = complete(API[adapter], upstream_body)  # type: ignore[arg-type]
    response = render(adapter, upstream_body, "up-model")
    for body in (response, orjson.dumps(response)):
        out = canonical_from_response(adapter, body)
        assert out == {
            "id": response["id"],
            "model": "up-model",
            "content": expected.text,
            "stop_reason": stop,
            "usage": {"input_tokens": expected.input_tokens, "output_tokens": expected.output_tokens},
        }
    assert expected.text.startswith("Echo: the")
    assert expected.input_tokens == 2 + 2 + 1 + 4  # system, both user turns and the assistant turn
    assert canonical_from_response(adapter, response, model="relay-model")["model"] == "relay-model"


def test_chat_stop_reasons_and_refusal() -> None:
    def chat(finish: str | None, **message: Any) -> dict[str, Any]:
        return {
            "id": "c",
            "model": "m",
            "choices": [{"message": {"content": "t", **message}, "finish_reason": finish}],
        }

    assert canonical_from_response("openai", chat("tool_calls"))["stop_reason"] == "tool_use"
    assert canonical_from_response("openai", chat("content_filter"))["stop_reason"] == "content_filter"
    assert canonical_from_response("openai", chat("weird"))["stop_reason"] == "weird"
    assert canonical_from_response("openai", chat(None))["stop_reason"] is None
    refused = canonical_from_response("openai", chat("stop", content=None, refusal="no"))
    assert (refused["content"], refused["stop_reason"]) == ("", "refusal")


def test_anthropic_joins_text_blocks_and_skips_others() -> None:
    body = {
        "id": "msg",
        "model": "m",
        "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "t", "name": "f", "input": {}},
            {"type": "text", "text": "b"},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 3},
    }
    out = canonical_from_response("anthropic", body)
    assert (out["content"], out["stop_reason"], out["usage"]) == (
        "ab",
        "tool_use",
        {"input_tokens": 4, "output_tokens": 2},
    )


def test_responses_statuses() -> None:
    def resp(status: str, **extra: Any) -> dict[str, Any]:
        return {"id": "r", "model": "m", "status": status, "output": [], **extra}

    assert canonical_from_response("openai_responses", resp("failed"))["stop_reason"] == "error"
    filtered = resp("incomplete", incomplete_details={"reason": "content_filter"})
    assert canonical_from_response("openai_responses", filtered)["stop_reason"] == "content_filter"
    refusal = resp(
        "completed",
        output=[{"type": "message", "content": [{"type": "refusal", "refusal": "no", "text": "no"}]}],
    )
    assert canonical_from_response("openai_responses", refusal)["stop_reason"] == "refusal"


@pytest.mark.parametrize("adapter", ["openai", "anthropic", "openai_responses"])
def test_empty_or_odd_responses_do_not_raise(adapter: str) -> None:
    out = canonical_from_response(adapter, {"choices": "x", "content": 3, "output": {"a": 1}})
    assert out["content"] == ""
    assert out["usage"] == {"input_tokens": 0, "output_tokens": 0}
    with pytest.raises(ValueError):
        canonical_from_response(adapter, b"[1, 2]")
