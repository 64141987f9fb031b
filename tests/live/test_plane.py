"""SPEC §7 over HTTP: every inference endpoint under both its paths, plain and streamed, the canonical
shape, the model list, what reaches the upstream (and what never does), ``X-Relay-Request-ID`` and
errors in the caller's shape — against a real ``relay serve`` on SQLite and on Postgres + Redis."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from relay.fake_upstream.embeddings import vector
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    CHAT_UPSTREAM,
    EMBED_MODEL,
    EMBED_UPSTREAM,
    HOST_ANTHROPIC,
    HOST_OPENAI,
    MESSAGES_MODEL,
    MESSAGES_UPSTREAM,
    RESPONSES_MODEL,
    RESPONSES_UPSTREAM,
    Gateway,
)
from tests.live.helpers import assert_anthropic_error, assert_openai_error, last_upstream

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


def test_model_list_needs_a_credential(gateway: Gateway) -> None:
    response = gateway.client.get("/v1/models")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert response.headers["x-relay-request-id"]


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


def assert_relay_key_not_forwarded(received: dict[str, Any], relay_key: str) -> None:
    assert relay_key not in json.dumps(received["headers"])
    assert relay_key not in json.dumps(received["body"])


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


MESSAGE = {"model": MESSAGES_MODEL, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}


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


# --- the official SDKs, unchanged, against Relay -------------------------------------------------------

SDK_MESSAGES: Any = [{"role": "user", "content": "hello from the sdk"}]  # the SDKs' TypedDicts
SDK_REPLY = "Echo: hello from the sdk"


@pytest.fixture
def oai(gateway: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{gateway.url}/openai/v1", api_key=gateway.key, max_retries=0, timeout=30
    ) as client:
        yield client


@pytest.fixture
def ant(gateway: Gateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=f"{gateway.url}/anthropic", api_key=gateway.key, max_retries=0, timeout=30
    ) as client:
        yield client


def test_openai_sdk_chat(oai: openai.OpenAI, fake: FakeUpstream) -> None:
    completion = oai.chat.completions.create(model=CHAT_MODEL, messages=SDK_MESSAGES, temperature=0)
    assert completion.choices[0].message.content == SDK_REPLY
    assert completion.model == CHAT_UPSTREAM
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    stream = oai.chat.completions.create(model=CHAT_MODEL, messages=SDK_MESSAGES, stream=True)
    chunks = list(stream)
    assert len(chunks) >= 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SDK_REPLY
    assert all(c.usage is None for c in chunks)
    stream = oai.chat.completions.create(
        model=CHAT_MODEL,
        messages=SDK_MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 4
    received = fake.requests()
    assert [r["body"]["model"] for r in received] == [CHAT_UPSTREAM] * 3
    assert all(gateway_key_absent(r, oai.api_key) for r in received)


def gateway_key_absent(received: dict[str, Any], key: str) -> bool:
    return key not in json.dumps(received["headers"]) and key not in json.dumps(received["body"])


def test_openai_sdk_responses(oai: openai.OpenAI, fake: FakeUpstream) -> None:
    response = oai.responses.create(model=RESPONSES_MODEL, input="hello from the sdk")
    assert response.output_text == SDK_REPLY
    assert response.usage is not None and response.usage.output_tokens == 5
    events = list(oai.responses.create(model=RESPONSES_MODEL, input="hello from the sdk", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == SDK_REPLY
    assert [r["path"] for r in fake.requests()] == ["/v1/responses"] * 2


def test_openai_sdk_embeddings(oai: openai.OpenAI, fake: FakeUpstream) -> None:
    result = oai.embeddings.create(
        model=EMBED_MODEL, input=["hello from the sdk", "again"]
    )  # base64 by default
    assert [d.embedding for d in result.data] == [vector("hello from the sdk"), vector("again")]
    assert result.usage.prompt_tokens == 5
    assert last_upstream(fake)["body"]["model"] == EMBED_UPSTREAM


def test_anthropic_sdk_messages(ant: anthropic.Anthropic, fake: FakeUpstream, gateway: Gateway) -> None:
    message = ant.messages.create(model=MESSAGES_MODEL, max_tokens=50, messages=SDK_MESSAGES)
    assert [block.type for block in message.content] == ["text"]
    assert getattr(message.content[0], "text", None) == SDK_REPLY
    assert message.usage.output_tokens == 5
    with ant.messages.stream(model=MESSAGES_MODEL, max_tokens=50, messages=SDK_MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == SDK_REPLY
    assert final.usage.output_tokens == 5 and final.stop_reason == "end_turn"
    for received in fake.requests():
        assert received["headers"]["x-api-key"] == gateway.host_key_values[HOST_ANTHROPIC]
        assert received["body"]["model"] == MESSAGES_UPSTREAM
        assert gateway_key_absent(received, gateway.key)


def test_sdk_errors_are_the_sdks_typed_exceptions(
    oai: openai.OpenAI, ant: anthropic.Anthropic, gateway: Gateway
) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        oai.chat.completions.create(model="no-such-model", messages=SDK_MESSAGES)
    assert not_found.value.status_code == 404
    assert not_found.value.code == "model_not_found"
    assert not_found.value.response.headers["x-relay-request-id"]
    with pytest.raises(anthropic.NotFoundError) as ant_not_found:
        ant.messages.create(model="no-such-model", max_tokens=10, messages=SDK_MESSAGES)
    assert ant_not_found.value.status_code == 404
    with pytest.raises(openai.AuthenticationError):
        oai.with_options(api_key="sk-relay-" + "x" * 43).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        ant.with_options(api_key="sk-relay-" + "x" * 43).messages.create(
            model=MESSAGES_MODEL,
            max_tokens=10,
            messages=SDK_MESSAGES,
        )
    with pytest.raises(openai.BadRequestError) as unsupported:  # translated, with no counterpart for n
        oai.chat.completions.create(model=MESSAGES_MODEL, messages=SDK_MESSAGES, n=2)
    assert unsupported.value.code == "unsupported_parameter"
    assert {m.id for m in oai.models.list()} >= {CHAT_MODEL, EMBED_MODEL, MESSAGES_MODEL, RESPONSES_MODEL}
