"""Streams: the exact event sequences the real APIs send, one event per flush."""

from __future__ import annotations

import time

import httpx

from relay.fake_upstream import complete
from relay.fake_upstream.token_counts import split_deltas

from .helpers import ANTHROPIC_AUTH, OPENAI_AUTH, parse_sse

USER = [{"role": "user", "content": "stream me some words please"}]
REPLY = "Echo: stream me some words please"


def test_split_deltas_join_back() -> None:
    assert split_deltas("Echo: a b") == ["Echo:", " a", " b"]
    long = " ".join(f"w{i}" for i in range(30))
    parts = split_deltas(long)
    assert len(parts) <= 8 and "".join(parts) == long


def test_chat_stream_with_usage(client: httpx.Client) -> None:
    request = {"model": "m1", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=request, headers=OPENAI_AUTH) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = parse_sse(text)
    assert all(name is None for name, _ in events)
    assert events[-1][1] == "[DONE]"
    chunks = [data for _, data in events[:-1]]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m1" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [c["choices"][0]["delta"]["content"] for c in chunks[1:-2]]
    assert len(content) > 1 and "".join(content) == REPLY
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["choices"][0]["delta"] == {}
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    expected = complete("chat", request)
    assert chunks[-1]["usage"]["prompt_tokens"] == expected.input_tokens == 5
    assert chunks[-1]["usage"]["completion_tokens"] == expected.output_tokens == 6
    assert chunks[-1]["usage"]["total_tokens"] == 11


def test_chat_stream_without_usage(client: httpx.Client) -> None:
    request = {"model": "m1", "messages": USER, "stream": True}
    response = client.post("/v1/chat/completions", json=request, headers=OPENAI_AUTH)
    events = parse_sse(response.text)
    assert events[-1][1] == "[DONE]"
    assert events[-2][1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in data for _, data in events[:-1])


def test_responses_stream_sequence(client: httpx.Client) -> None:
    request = {"model": "r1", "input": USER, "stream": True}
    response = client.post("/v1/responses", json=request, headers=OPENAI_AUTH)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    names = [name for name, _ in events]
    deltas = len(split_deltas(REPLY))
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["type"] for _, data in events] == names
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    created = events[0][1]["response"]
    assert created["status"] == "in_progress" and created["model"] == "r1" and created["usage"] is None
    assert "".join(data["delta"] for name, data in events if name == "response.output_text.delta") == REPLY
    assert events[-4][1]["text"] == REPLY
    completed = events[-1][1]["response"]
    assert completed["id"] == created["id"]
    assert completed["status"] == "completed"
    assert completed["output"][0]["content"][0]["text"] == REPLY
    assert completed["usage"]["input_tokens"] == 5
    assert completed["usage"]["output_tokens"] == 6
    assert completed["usage"]["total_tokens"] == 11


def test_responses_stream_incomplete_when_capped(client: httpx.Client) -> None:
    request = {"model": "r1", "input": "a b c d", "stream": True, "max_output_tokens": 2}
    events = parse_sse(client.post("/v1/responses", json=request, headers=OPENAI_AUTH).text)
    assert events[-1][0] == "response.incomplete"
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_anthropic_stream_sequence(client: httpx.Client) -> None:
    request = {"model": "c1", "max_tokens": 50, "messages": USER, "stream": True}
    response = client.post("/v1/messages", json=request, headers=ANTHROPIC_AUTH)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    names = [name for name, _ in events]
    deltas = len(split_deltas(REPLY))
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert [data["type"] for _, data in events] == names
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["model"] == "c1" and start["content"] == []
    assert start["usage"]["input_tokens"] == 5 and start["usage"]["output_tokens"] == 1
    assert events[1][1]["content_block"] == {"type": "text", "text": ""}
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert text == REPLY
    assert all(d["delta"]["type"] == "text_delta" for n, d in events if n == "content_block_delta")
    message_delta = events[-2][1]
    assert message_delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert message_delta["usage"] == {"output_tokens": 6}


def test_events_are_flushed_one_by_one_with_chunk_delay(client: httpx.Client) -> None:
    request = {"model": "m", "messages": USER, "stream": True, "fake": {"chunk_delay_ms": 30}}
    arrivals: list[float] = []
    with client.stream("POST", "/v1/chat/completions", json=request, headers=OPENAI_AUTH) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append(time.perf_counter())
    # each event arrives on its own, ~30 ms after the previous one (never all at the end)
    assert len(arrivals) == 3 + len(split_deltas(REPLY))  # role, deltas, finish, [DONE]
    assert arrivals[-1] - arrivals[0] >= 0.03 * (len(arrivals) - 1) * 0.9
