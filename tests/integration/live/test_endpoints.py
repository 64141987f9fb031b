"""SPEC §7 over HTTP: every inference endpoint under both its paths, plain and streamed, the canonical
shape (§7.2), the model list and ``X-Relay-Request-ID`` — against a real ``relay serve`` on SQLite and on
Postgres + Redis."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    CHAT_UPSTREAM,
    EMBED_MODEL,
    EMBED_UPSTREAM,
    MESSAGES_MODEL,
    MESSAGES_UPSTREAM,
    RESPONSES_MODEL,
    RESPONSES_UPSTREAM,
    Gateway,
)
from tests.integration.live.helpers import assert_openai_error, assert_relay_key_not_forwarded, last_upstream

# (name, paths, model, upstream name, upstream path, body without model)
ENDPOINTS: list[tuple[str, tuple[str, ...], str, str, str, dict[str, Any]]] = [
    (
        "chat",
        ("/openai/v1/chat/completions", "/v1/chat/completions"),
        CHAT_MODEL,
        CHAT_UPSTREAM,
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "system", "content": "be brief ✓ — ünïcode"},
                {"role": "user", "content": "hi there"},
            ],
            "temperature": 0.2,
            "user": "caller-7",
            "metadata": {"trace": "abc"},
        },
    ),
    (
        "responses",
        ("/openai/v1/responses", "/v1/responses"),
        RESPONSES_MODEL,
        RESPONSES_UPSTREAM,
        "/v1/responses",
        {"input": "hi there", "instructions": "be brief", "max_output_tokens": 40, "store": False},
    ),
    (
        "embeddings",
        ("/openai/v1/embeddings", "/v1/embeddings"),
        EMBED_MODEL,
        EMBED_UPSTREAM,
        "/v1/embeddings",
        {"input": ["hi there", "general kenobi"], "dimensions": 4, "encoding_format": "float"},
    ),
    (
        "messages",
        ("/anthropic/v1/messages", "/v1/messages"),
        MESSAGES_MODEL,
        MESSAGES_UPSTREAM,
        "/v1/messages",
        {
            "max_tokens": 40,
            "system": "be brief",
            "messages": [{"role": "user", "content": "hi there"}],
            "metadata": {"user_id": "u-1"},
        },
    ),
]
PLAIN_CASES = [
    pytest.param(path, model, upstream, upstream_path, body, id=f"{name}:{path}")
    for name, paths, model, upstream, upstream_path, body in ENDPOINTS
    for path in paths
]
STREAM_CASES = [case for case in PLAIN_CASES if "embeddings" not in str(case.id)]
# what the last event of each upstream stream looks like
STREAM_END = {
    "/v1/chat/completions": "[DONE]",
    "/v1/responses": "response.completed",
    "/v1/messages": "message_stop",
}


# --- endpoints, plain ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "model", "upstream", "upstream_path", "body"), PLAIN_CASES)
def test_plain_request_is_forwarded_with_the_upstream_model_name(
    gateway: Gateway,
    fake: FakeUpstream,
    path: str,
    model: str,
    upstream: str,
    upstream_path: str,
    body: dict[str, Any],
) -> None:
    sent = {"model": model, **body}
    response = gateway.post(path, sent)
    assert response.status_code == 200, response.text
    assert response.headers["x-relay-request-id"]
    assert response.headers["content-type"].startswith("application/json")
    received = last_upstream(fake)
    assert received["path"] == upstream_path
    # The body goes upstream as sent, with only `model` rewritten to the binding's upstream name,
    # and with the binding host's key, never the caller's relay key.
    assert received["body"] == {**sent, "model": upstream}
    assert received["key"] in gateway.host_key_values.values()
    assert_relay_key_not_forwarded(received, gateway.key)
    answer = response.json()
    assert answer["model"] == upstream  # the upstream's answer is passed through untouched
    assert answer["usage"]


@pytest.mark.parametrize(("path", "model", "upstream", "upstream_path", "body"), STREAM_CASES)
def test_stream_passes_through_event_by_event(
    gateway: Gateway,
    fake: FakeUpstream,
    path: str,
    model: str,
    upstream: str,
    upstream_path: str,
    body: dict[str, Any],
) -> None:
    sent = {"model": model, **body, "stream": True}
    result = gateway.stream(path, sent)
    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.headers["x-relay-request-id"]
    assert "content-length" not in result.headers
    assert len(result.events) >= 5, result.events
    last = result.events[-1]
    assert (last.event or last.data) == STREAM_END[upstream_path]
    received = last_upstream(fake)
    assert received["path"] == upstream_path
    forwarded = dict(received["body"])
    if upstream_path == "/v1/chat/completions":
        # Relay asks an OpenAI chat stream for usage (to meter it) and hides it from the caller again.
        assert forwarded.pop("stream_options") == {"include_usage": True}
        chunks = [e.json() for e in result.events if e.data != "[DONE]"]
        assert all("usage" not in chunk for chunk in chunks), chunks
        assert all(chunk["choices"] for chunk in chunks)
    assert forwarded == {**sent, "model": upstream}


def test_chat_stream_with_caller_requested_usage_keeps_the_usage_chunk(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    sent = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "one two three"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result = gateway.stream("/v1/chat/completions", sent)
    assert result.status == 200
    chunks = [e.json() for e in result.events if e.data != "[DONE]"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert last_upstream(fake)["body"] == {**sent, "model": CHAT_UPSTREAM}


def test_sse_events_arrive_as_the_upstream_sends_them(gateway: Gateway, fake: FakeUpstream) -> None:
    """No buffering: with the fake pausing between events, the caller holds the first event while the
    request is still in flight (its one log line is written after the last byte), and the events come
    in several separate bursts rather than as one body."""
    delay_ms = 80
    sent = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "alpha beta gamma delta"}],
        "stream": True,
        "fake": {"chunk_delay_ms": delay_ms},
    }
    result = gateway.stream("/openai/v1/chat/completions", sent, watch_log=True)
    assert result.status == 200
    assert result.request_id_seen_in_log_at_first_event is False
    arrivals = [e.arrived for e in result.events]
    assert arrivals == sorted(arrivals)
    # Gaps of at least half the upstream's pause between consecutive events: a gateway that buffered
    # the stream would hand every event over at once (no such gap at all).
    separate = sum(1 for a, b in itertools.pairwise(arrivals) if b - a >= delay_ms / 2000)
    assert separate >= 3, arrivals
    text = "".join(e.json()["choices"][0]["delta"].get("content") or "" for e in result.events[:-1])
    assert text == "Echo: alpha beta gamma delta"
    # and the request's log line does appear once the stream is over
    gateway.wait_log_line(result.headers["x-relay-request-id"])


# --- canonical shape (§7.2) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "upstream_path", "upstream"),
    [
        (CHAT_MODEL, "/v1/chat/completions", CHAT_UPSTREAM),
        (MESSAGES_MODEL, "/v1/messages", MESSAGES_UPSTREAM),
        (RESPONSES_MODEL, "/v1/responses", RESPONSES_UPSTREAM),
    ],
)
def test_generate_plain(
    gateway: Gateway, fake: FakeUpstream, model: str, upstream_path: str, upstream: str
) -> None:
    body = {
        "model": model,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi there friend"}],
        "max_tokens": 30,
    }
    response = gateway.post("/v1/generate", body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == {"id", "model", "content", "stop_reason", "usage"}
    assert answer["model"] == model
    assert answer["content"] == "Echo: hi there friend"
    assert answer["usage"] == {"input_tokens": 5, "output_tokens": 4}
    assert answer["stop_reason"]
    received = last_upstream(fake)
    assert (received["path"], received["body"]["model"]) == (upstream_path, upstream)


@pytest.mark.parametrize("model", [CHAT_MODEL, MESSAGES_MODEL, RESPONSES_MODEL])
def test_generate_stream_is_deltas_then_one_done_with_usage(
    gateway: Gateway, fake: FakeUpstream, model: str
) -> None:
    body = {
        "model": model,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi there friend"}],
        "stream": True,
    }
    result = gateway.stream("/v1/generate", body)
    assert result.status == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    names = [e.event for e in result.events]
    assert names[-1] == "done" and names.count("done") == 1
    assert set(names[:-1]) == {"delta"} and len(names) >= 3
    assert "".join(e.json()["text"] for e in result.events[:-1]) == "Echo: hi there friend"
    done = result.events[-1].json()
    assert done["usage"] == {"input_tokens": 5, "output_tokens": 4}
    assert done["stop_reason"]
    assert fake.stats()["requests"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_generate_upstream_error_is_in_the_callers_shape(
    gateway: Gateway, fake: FakeUpstream, stream: bool
) -> None:
    s = gateway.scenario(["fail-400"], adapter="anthropic")  # the upstream answers 400 (no failover)
    body = {"model": s.model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    response = gateway.post("/v1/generate", body, key=s.key)
    assert response.status_code == 400
    error = response.json()
    assert set(error) == {"error"}, error
    assert {"type", "message"} <= set(error["error"]), error


@pytest.mark.parametrize(
    "body",
    [
        {"model": CHAT_MODEL},
        {"model": CHAT_MODEL, "messages": []},
        {"model": CHAT_MODEL, "messages": [{"role": "system", "content": "x"}]},
        {"model": CHAT_MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]},
        {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
        {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
    ],
)
def test_generate_refuses_what_the_canonical_shape_does_not_allow(
    gateway: Gateway, fake: FakeUpstream, body: dict[str, Any]
) -> None:
    assert_openai_error(gateway.post("/v1/generate", body), 400, "invalid_request", "invalid_request_error")
    assert fake.stats()["requests"] == 0


# --- GET /v1/models -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/models", "/openai/v1/models"])
def test_model_list_shows_what_the_credential_may_use(gateway: Gateway, path: str) -> None:
    response = gateway.client.get(path, headers=gateway.auth(None))
    assert response.status_code == 200, response.text
    assert response.headers["x-relay-request-id"]
    listing = response.json()
    assert listing["object"] == "list"
    ids = {m["id"] for m in listing["data"]}
    assert {CHAT_MODEL, EMBED_MODEL, MESSAGES_MODEL, RESPONSES_MODEL} <= ids
    assert all(m["object"] == "model" for m in listing["data"])
    narrow = gateway.scenario(models=[])
    gateway.patch("policies", narrow.policy, {"models": [narrow.model]})
    listing = gateway.client.get(path, headers=gateway.auth(narrow.key)).json()
    assert [m["id"] for m in listing["data"]] == [narrow.model]


# --- X-Relay-Request-ID ----------------------------------------------------------------------------


def test_every_response_carries_a_request_id(gateway: Gateway) -> None:
    failing = gateway.scenario(["fail-429-ra30", "fail-429-ra30"])  # 502, then 503 (breakers open)
    responses = {
        "200": gateway.chat(),
        "400": gateway.post("/v1/chat/completions", {"messages": []}),
        "401": gateway.post("/v1/chat/completions", {"model": CHAT_MODEL}, headers={}),
        "404-model": gateway.chat("no-such-model"),
        "404-route": gateway.client.post("/v1/no-such-route", json={}),
        "405": gateway.client.get("/v1/chat/completions"),
        "502": gateway.chat(failing.model, key=failing.key),
        "503": gateway.chat(failing.model, key=failing.key),
        "livez": gateway.client.get("/livez"),
        "healthz": gateway.client.get("/healthz"),
    }
    seen = set()
    for name, response in responses.items():
        status = name.split("-")[0]
        expected = int(status) if status.isdigit() else 200
        assert response.status_code == expected, (name, response.text)
        request_id = response.headers.get("x-relay-request-id")
        assert request_id, name
        seen.add(request_id)
    assert len(seen) == len(responses), "request ids must be unique"
