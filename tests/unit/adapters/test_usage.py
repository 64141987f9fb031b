from __future__ import annotations

from typing import Any

import orjson
import pytest

from relay.adapters import Usage, usage_from_response
from relay.fake_upstream import embeddings as fake_embeddings

from .helpers import BODIES, INPUT_TOKENS, OUTPUT_TOKENS, render


@pytest.mark.parametrize("shape", ["openai", "openai_responses", "anthropic"])
def test_usage_from_fake_responses(shape: str) -> None:
    body = render(shape, BODIES[shape])
    expected = Usage(INPUT_TOKENS, OUTPUT_TOKENS, 0, None if shape == "anthropic" else 0)
    assert usage_from_response(shape, body) == expected
    assert usage_from_response(shape, orjson.dumps(body)) == expected


def test_chat_cached_tokens() -> None:
    body = {
        "usage": {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
    }
    assert usage_from_response("openai", body) == Usage(2006, 300, 1920, 0)


def test_responses_cached_tokens() -> None:
    body = {
        "object": "response",
        "usage": {
            "input_tokens": 328,
            "input_tokens_details": {"cached_tokens": 256},
            "output_tokens": 52,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 380,
        },
    }
    assert usage_from_response("openai_responses", body) == Usage(328, 52, 256, 0)


def test_reasoning_tokens_of_chat_and_responses_and_none_when_not_reported() -> None:
    """Of the output tokens, those an OpenAI upstream reports as reasoning (SPEC §14's Batch usage sums
    them); an upstream without the count (older servers, Anthropic) is None, not 0."""
    chat = {
        "prompt_tokens": 10,
        "completion_tokens": 900,
        "completion_tokens_details": {"reasoning_tokens": 768},
    }
    responses = {"input_tokens": 10, "output_tokens": 900, "output_tokens_details": {"reasoning_tokens": 512}}
    assert usage_from_response("openai", {"usage": chat}).reasoning_tokens == 768
    assert usage_from_response("openai_responses", orjson.dumps({"usage": responses})).reasoning_tokens == 512
    for malformed in (
        {},
        {"completion_tokens_details": None},
        {"completion_tokens_details": {"reasoning_tokens": -1}},
    ):
        assert (
            usage_from_response("openai", {"usage": {"completion_tokens": 5, **malformed}}).reasoning_tokens
            is None
        )
    assert (
        usage_from_response(
            "openai_responses", {"usage": {"output_tokens_details": {"reasoning_tokens": "7"}}}
        )
        == Usage()
    )
    anthropic = {"input_tokens": 1, "output_tokens": 900}
    assert usage_from_response("anthropic", {"usage": anthropic}) == Usage(1, 900, 0, None)


def test_anthropic_cache_reads_and_writes_count_as_input() -> None:
    body = {
        "type": "message",
        "usage": {
            "input_tokens": 21,
            "cache_creation_input_tokens": 188,
            "cache_read_input_tokens": 1000,
            "output_tokens": 393,
            "service_tier": "standard",
        },
    }
    assert usage_from_response("anthropic", body) == Usage(21 + 188 + 1000, 393, 1000)


def test_embeddings_usage_from_fake() -> None:
    request = {"model": "emb", "input": ["one two three", "four"]}
    body = fake_embeddings.render(request, "emb-up")
    assert usage_from_response("embeddings", body) == Usage(4, 0, 0)
    assert usage_from_response("embeddings", orjson.dumps(body)) == Usage(4, 0, 0)


def test_large_embeddings_body_reads_usage_from_the_tail() -> None:
    request = {"model": "emb", "input": [f"text number {i}" for i in range(200)], "dimensions": 256}
    raw = orjson.dumps(fake_embeddings.render(request, "emb-up"))
    assert len(raw) > 64 * 1024
    assert usage_from_response("embeddings", raw) == Usage(600, 0, 0)


def test_large_body_with_usage_first_falls_back_to_a_full_parse() -> None:
    body = {
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        "choices": [{"message": {"content": "x" * 100_000, "usage": "decoy"}}],
        "tail": {"usage": {"other": 1}},
    }
    assert usage_from_response("openai", orjson.dumps(body)) == Usage(7, 3, 0)


def test_large_anthropic_body() -> None:
    body = {
        "content": [{"type": "text", "text": "word " * 30_000}],
        "usage": {"input_tokens": 5, "output_tokens": 30_000, "cache_read_input_tokens": 2},
    }
    assert usage_from_response("anthropic", orjson.dumps(body)) == Usage(7, 30_000, 2)


def test_canonical_usage() -> None:
    assert usage_from_response("canonical", {"usage": {"input_tokens": 3, "output_tokens": 4}}) == Usage(
        3, 4, 0
    )


@pytest.mark.parametrize("shape", ["openai", "openai_responses", "anthropic", "embeddings", "canonical"])
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b"{}",
        b'{"usage": null}',
        b'{"usage": "many"}',
        b'{"usage": []}',
        b'{"usage": {"prompt_tokens": "3", "input_tokens": -1, "output_tokens": true, '
        b'"completion_tokens": 2.5}}',
        b'{"usage": {"prompt_tokens_details": null, "input_tokens_details": 3}}',
    ],
)
def test_missing_or_malformed_usage_is_zero(shape: str, body: bytes) -> None:
    assert usage_from_response(shape, body) == Usage()
    parsed: Any = None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    if isinstance(parsed, dict):
        assert usage_from_response(shape, parsed) == Usage()


def test_unknown_shape_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        usage_from_response("grpc", b"{}")


def test_usage_total() -> None:
    assert Usage(3, 4, 1).total_tokens == 7
