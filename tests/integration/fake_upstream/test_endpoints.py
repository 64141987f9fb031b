"""Non-streaming answers: the real providers' shapes, the echoed model, and documented usage numbers."""

from __future__ import annotations

import base64
import struct

import httpx

from relay.fake_upstream import complete, input_tokens
from relay.fake_upstream.embeddings import vector

from .helpers import ANTHROPIC_AUTH, OPENAI_AUTH

CHAT_BODY = {
    "model": "gpt-upstream-name",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "first question here"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "what is   the capital"}]},
    ],
}


def test_chat_completion_shape_and_usage(client: httpx.Client) -> None:
    response = client.post("/v1/chat/completions", json=CHAT_BODY, headers=OPENAI_AUTH)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "gpt-upstream-name"
    [choice] = body["choices"]
    assert choice["index"] == 0
    assert choice["finish_reason"] == "stop"
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "Echo: what is the capital"
    # 3 + 3 + 2 + 4 words in, "Echo: what is the capital" = 5 words out
    assert body["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 5,
        "total_tokens": 17,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    expected = complete("chat", CHAT_BODY)
    assert (expected.input_tokens, expected.output_tokens) == (12, 5)


def test_chat_max_tokens_truncates_with_length(client: httpx.Client) -> None:
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "one two three"}]}
    answer = client.post("/v1/chat/completions", json=body, headers=OPENAI_AUTH).json()
    assert answer["choices"][0]["message"]["content"] == "Echo: one"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == 2


def test_responses_shape_and_usage(client: httpx.Client) -> None:
    request = {"model": "resp-model", "instructions": "Be brief please", "input": "tell me a joke"}
    response = client.post("/v1/responses", json=request, headers=OPENAI_AUTH)
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("resp_")
    assert body["object"] == "response"
    assert isinstance(body["created_at"], int)
    assert body["status"] == "completed"
    assert body["model"] == "resp-model"
    assert body["instructions"] == "Be brief please"
    [item] = body["output"]
    assert item["type"] == "message" and item["role"] == "assistant" and item["status"] == "completed"
    assert item["id"].startswith("msg_")
    assert item["content"] == [
        {"type": "output_text", "annotations": [], "logprobs": [], "text": "Echo: tell me a joke"}
    ]
    assert body["usage"] == {
        "input_tokens": 7,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12,
    }


def test_responses_message_items_and_max_output_tokens(client: httpx.Client) -> None:
    request = {
        "model": "m",
        "max_output_tokens": 3,
        "input": [
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "reply"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a b c d e"}]},
        ],
    }
    body = client.post("/v1/responses", json=request, headers=OPENAI_AUTH).json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["content"][0]["text"] == "Echo: a b"
    assert body["usage"]["input_tokens"] == 7 == input_tokens("responses", request)
    assert body["usage"]["output_tokens"] == 3


def test_anthropic_message_shape_and_usage(client: httpx.Client) -> None:
    request = {
        "model": "claude-upstream",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "system words here"}],
        "messages": [{"role": "user", "content": "hi there"}],
    }
    response = client.post("/v1/messages", json=request, headers=ANTHROPIC_AUTH)
    assert response.status_code == 200
    body = response.json()
    assert body["id"].startswith("msg_")
    assert body["type"] == "message"
    assert body["role"] == "assistant"
    assert body["model"] == "claude-upstream"
    assert body["content"] == [{"type": "text", "text": "Echo: hi there"}]
    assert body["stop_reason"] == "end_turn"
    assert body["stop_sequence"] is None
    assert body["usage"] == {
        "input_tokens": 5,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_anthropic_accepts_bearer_and_stops_at_max_tokens(client: httpx.Client) -> None:
    request = {"model": "c", "max_tokens": 1, "messages": [{"role": "user", "content": "x y"}]}
    headers = {"authorization": "Bearer k", "anthropic-version": "2023-06-01"}
    body = client.post("/v1/messages", json=request, headers=headers).json()
    assert body["stop_reason"] == "max_tokens"
    assert body["content"][0]["text"] == "Echo:"


def test_embeddings_float(client: httpx.Client) -> None:
    request = {"model": "emb", "input": ["hello world", "a b c"]}
    body = client.post("/v1/embeddings", json=request, headers=OPENAI_AUTH).json()
    assert body["object"] == "list"
    assert body["model"] == "emb"
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" for d in body["data"])
    assert body["data"][0]["embedding"] == vector("hello world")
    assert len(body["data"][1]["embedding"]) == 8
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    again = client.post("/v1/embeddings", json=request, headers=OPENAI_AUTH).json()
    assert again["data"] == body["data"]


def test_embeddings_base64_and_dimensions(client: httpx.Client) -> None:
    request = {"model": "emb", "input": "single", "encoding_format": "base64", "dimensions": 4}
    body = client.post("/v1/embeddings", json=request, headers=OPENAI_AUTH).json()
    decoded = struct.unpack("<4f", base64.b64decode(body["data"][0]["embedding"]))
    assert list(decoded) == vector("single", 4)
    assert body["usage"]["prompt_tokens"] == 1


def test_embeddings_bad_input_is_400(client: httpx.Client) -> None:
    response = client.post("/v1/embeddings", json={"model": "e", "input": 5}, headers=OPENAI_AUTH)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"
