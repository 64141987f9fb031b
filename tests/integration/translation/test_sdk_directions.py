"""Every direction among the three provider shapes, through ``relay serve``, with the official SDKs
(SPEC §7.3): plain and streamed answers, a full tool-call round trip, images, stop reasons, cached
usage, refusals before the upstream, upstream errors and a mid-stream error in the caller's shape, and
the usage event's ``inbound_shape`` / ``adapter`` (SPEC §8)."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import openai
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    CHAT_UPSTREAM,
    MESSAGES_MODEL,
    MESSAGES_UPSTREAM,
    RESPONSES_MODEL,
    RESPONSES_UPSTREAM,
    Gateway,
)
from tests.integration.translation.sdk import CALLERS, TOOL_NAME, TOOL_RESULT

pytestmark = pytest.mark.parametrize("gateway", ["sqlite"], indirect=True)

MODEL_OF = {"openai": CHAT_MODEL, "anthropic": MESSAGES_MODEL, "openai_responses": RESPONSES_MODEL}
UPSTREAM_OF = {
    "openai": CHAT_UPSTREAM,
    "anthropic": MESSAGES_UPSTREAM,
    "openai_responses": RESPONSES_UPSTREAM,
}
PATH_OF = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "openai_responses": "/v1/responses"}
DIRECTIONS = [(a, b) for a in MODEL_OF for b in MODEL_OF if a != b]
IDS = [f"{a}-to-{b}" for a, b in DIRECTIONS]
END = {"openai": "stop", "openai_responses": "completed", "anthropic": "end_turn"}
TOOL_STOP = {"openai": "tool_calls", "openai_responses": "completed", "anthropic": "tool_use"}
LENGTH = {"openai": "length", "openai_responses": "incomplete:max_output_tokens", "anthropic": "max_tokens"}
LIMIT_FIELD = {
    "openai": "max_completion_tokens",
    "openai_responses": "max_output_tokens",
    "anthropic": "max_tokens",
}


def last_upstream(fake: FakeUpstream) -> dict[str, Any]:
    return fake.requests(limit=1)[-1]


@pytest.mark.parametrize(("caller", "adapter"), DIRECTIONS, ids=IDS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_text_answer(gateway: Gateway, fake: FakeUpstream, caller: str, adapter: str, stream: bool) -> None:
    result = CALLERS[caller](gateway).ask(MODEL_OF[adapter], "hello there", stream=stream)
    assert result.text == "Echo: hello there"
    assert result.stop == END[caller]
    assert result.model == MODEL_OF[adapter]  # the caller's model name, not the upstream's
    assert (result.input_tokens, result.output_tokens, result.cached_tokens) == (4, 3, 0)
    sent = last_upstream(fake)
    assert sent["path"] == {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}.get(
        adapter, "/v1/responses"
    )
    assert sent["body"]["model"] == UPSTREAM_OF[adapter]
    assert result.id  # the upstream's own id
    if adapter == "anthropic":
        assert sent["body"]["system"] == "be brief" and sent["body"]["max_tokens"] == (
            100 if caller == "anthropic" else 4096
        )
        assert result.id.startswith("msg_01")
    elif adapter == "openai_responses":
        assert sent["body"]["instructions"] == "be brief" and sent["body"]["store"] is False
        assert result.id.startswith("resp_")
    else:
        assert sent["body"]["messages"][0] == {"role": "system", "content": "be brief"}
        assert result.id.startswith("chatcmpl-")


@pytest.mark.parametrize(("caller", "adapter"), DIRECTIONS, ids=IDS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_tool_call_round_trip(
    gateway: Gateway, fake: FakeUpstream, caller: str, adapter: str, stream: bool
) -> None:
    """The model calls a tool, the caller answers with its result (matched by id), the model answers."""
    prompt = f"use {TOOL_NAME} for Paris"
    first, second = CALLERS[caller](gateway).round_trip(MODEL_OF[adapter], prompt, stream=stream)
    assert first.stop == TOOL_STOP[caller] and first.text == ""
    assert [(c.name, json.loads(c.arguments)) for c in first.calls] == [(TOOL_NAME, {"text": prompt})]
    upstream_id = first.calls[0].id
    assert upstream_id.startswith("toolu_01" if adapter == "anthropic" else "call_")  # ids preserved
    sent = last_upstream(fake)["body"]
    assert upstream_id in json.dumps(sent)  # the result went back under the same id
    assert second.text == f"Echo: {TOOL_RESULT}" and second.stop == END[caller] and not second.calls


@pytest.mark.parametrize(("caller", "adapter"), DIRECTIONS, ids=IDS)
def test_length_stop_and_cached_usage(gateway: Gateway, caller: str, adapter: str) -> None:
    """``length`` ↔ ``max_tokens`` ↔ ``incomplete``; cached input = ``cached_tokens`` ↔ cache reads."""
    limit = {LIMIT_FIELD[caller]: 2}
    result = CALLERS[caller](gateway).ask(MODEL_OF[adapter], "hello there fake:cached=3", **limit)
    assert result.stop == LENGTH[caller] and result.text == "Echo: hello"
    assert (result.input_tokens, result.output_tokens, result.cached_tokens) == (5, 2, 3)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize(("caller", "adapter"), [("openai", "anthropic"), ("anthropic", "openai")])
def test_stop_sequences(
    gateway: Gateway, fake: FakeUpstream, caller: str, adapter: str, stream: bool
) -> None:
    field = {"openai": "stop", "anthropic": "stop_sequences"}[caller]
    result = CALLERS[caller](gateway).ask(
        MODEL_OF[adapter], "hello there", stream=stream, **{field: ["there"]}
    )
    assert result.text == "Echo: hello "
    assert result.stop == END[caller] if caller == "openai" else result.stop in ("end_turn", "stop_sequence")
    sent = last_upstream(fake)["body"]
    assert sent[{"openai": "stop", "anthropic": "stop_sequences"}[adapter]] == ["there"]


PNG = "iVBORw0KGgo="


def test_chat_image_to_anthropic(gateway: Gateway, fake: FakeUpstream) -> None:
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]
    assert CALLERS["openai"](gateway).ask(MESSAGES_MODEL, parts).text == "Echo: look"
    content = last_upstream(fake)["body"]["messages"][0]["content"]
    assert content[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }


def test_anthropic_images_to_responses(gateway: Gateway, fake: FakeUpstream) -> None:
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
    ]
    assert CALLERS["anthropic"](gateway).ask(RESPONSES_MODEL, parts).text == "Echo: look"
    content = last_upstream(fake)["body"]["input"][0]["content"]
    assert content[1:] == [
        {"type": "input_image", "image_url": "https://example.com/a.png"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
    ]


def test_responses_image_to_chat(gateway: Gateway, fake: FakeUpstream) -> None:
    parts = [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "https://example.com/a.png"},
    ]
    assert CALLERS["openai_responses"](gateway).ask(CHAT_MODEL, parts).text == "Echo: look"
    content = last_upstream(fake)["body"]["messages"][1]["content"]
    assert content[1] == {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}


# --- refusals before the upstream (nothing dropped silently) ---------------------------------------


def test_openai_sdk_gets_unsupported_parameter(gateway: Gateway, fake: FakeUpstream) -> None:
    chat = CALLERS["openai"](gateway)
    with pytest.raises(openai.BadRequestError) as info:
        chat.ask(MESSAGES_MODEL, "hi", n=2)
    assert info.value.code == "unsupported_parameter"
    assert "unsupported_parameter: n (adapter anthropic)" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        chat.ask(RESPONSES_MODEL, "hi", stop=["x"])
    assert "unsupported_parameter: stop (adapter openai_responses)" in info.value.message
    assert fake.stats()["requests"] == 0


def test_anthropic_sdk_gets_unsupported_parameter(gateway: Gateway, fake: FakeUpstream) -> None:
    messages = CALLERS["anthropic"](gateway)
    with pytest.raises(anthropic.BadRequestError) as info:
        messages.ask(CHAT_MODEL, "hi", extra_body={"top_k": 5})
    assert info.value.body["error"] == {  # type: ignore[index]
        "type": "invalid_request_error",
        "message": "unsupported_parameter: top_k (adapter openai)",
    }
    with pytest.raises(anthropic.BadRequestError) as info:
        messages.ask(RESPONSES_MODEL, "hi", stop_sequences=["x"])
    assert "unsupported_parameter: stop_sequences (adapter openai_responses)" in str(info.value)
    assert fake.stats()["requests"] == 0


def test_pure_hints_are_dropped(gateway: Gateway, fake: FakeUpstream) -> None:
    result = CALLERS["openai"](gateway).ask(MESSAGES_MODEL, "hi", store=True, service_tier="auto", n=1)
    assert result.text == "Echo: hi"
    sent = last_upstream(fake)["body"]
    assert not {"store", "service_tier", "n"} & set(sent)


def test_embeddings_for_a_non_openai_binding(gateway: Gateway, fake: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/openai/v1", api_key=gateway.key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MESSAGES_MODEL, input="hi")
    assert info.value.code == "unsupported_binding"
    assert fake.stats()["requests"] == 0


# --- upstream errors, whole and mid-stream ---------------------------------------------------------


@pytest.mark.parametrize(
    ("caller", "adapter", "status", "exc"),
    [
        ("openai", "anthropic", 400, openai.BadRequestError),
        ("anthropic", "openai", 404, anthropic.NotFoundError),
        ("openai_responses", "anthropic", 422, openai.UnprocessableEntityError),
        ("anthropic", "openai_responses", 400, anthropic.BadRequestError),
    ],
)
def test_upstream_error_keeps_its_status_in_the_callers_shape(
    gateway: Gateway, caller: str, adapter: str, status: int, exc: type[Exception]
) -> None:
    scenario = gateway.scenario([f"fail-{status}"], adapter=adapter)
    with pytest.raises(exc) as info:
        CALLERS[caller](gateway, key=scenario.key).ask(scenario.model, "hi")
    assert info.value.status_code == status  # type: ignore[attr-defined]
    body = info.value.body  # type: ignore[attr-defined]
    if caller == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    else:
        assert body["code"] == "upstream_error" and body["message"]


@pytest.mark.parametrize(("caller", "adapter"), DIRECTIONS, ids=IDS)
def test_mid_stream_error_ends_the_stream_with_the_callers_error_event(
    gateway: Gateway, caller: str, adapter: str
) -> None:
    body: dict[str, Any] = {"model": MODEL_OF[adapter], "stream": True, "max_tokens": 50}
    if caller == "openai_responses":
        body = {"model": MODEL_OF[adapter], "stream": True, "input": "hello fake:stream_error"}
    else:
        body["messages"] = [{"role": "user", "content": "hello fake:stream_error"}]
    result = gateway.stream(PATH_OF[caller] if caller != "anthropic" else "/anthropic/v1/messages", body)
    assert result.status == 200
    last = result.events[-1]
    if caller == "openai":
        assert "error" in last.json() and last.data != "[DONE]"
        assert any(
            e.json().get("choices", [{}])[0].get("delta", {}).get("content") for e in result.events[1:-1]
        )
    elif caller == "anthropic":
        assert last.event == "error" and last.json()["type"] == "error"
    else:
        assert last.event == "error" and last.json()["message"]


@pytest.mark.parametrize(
    ("caller", "adapter"),
    [("openai", "anthropic"), ("anthropic", "openai_responses"), ("openai_responses", "openai")],
)
def test_upstream_connection_broken_mid_stream_ends_with_the_callers_error_event(
    gateway: Gateway, caller: str, adapter: str
) -> None:
    body: dict[str, Any] = {"model": MODEL_OF[adapter], "stream": True, "max_tokens": 50}
    if caller == "openai_responses":
        body = {"model": MODEL_OF[adapter], "stream": True, "input": "hello fake:drop_stream"}
    else:
        body["messages"] = [{"role": "user", "content": "hello fake:drop_stream"}]
    result = gateway.stream(PATH_OF[caller] if caller != "anthropic" else "/anthropic/v1/messages", body)
    errors = [
        e for e in result.events if e.event == "error" or (e.data.startswith("{") and "error" in e.json())
    ]
    assert len(errors) == 1 and result.events[-1] is errors[0], [e.data for e in result.events]


def test_openai_sdk_raises_on_a_mid_stream_error(gateway: Gateway) -> None:
    with pytest.raises(openai.APIError):
        CALLERS["openai"](gateway).ask(MESSAGES_MODEL, "hello fake:stream_error", stream=True)


def test_anthropic_sdk_raises_on_a_mid_stream_error(gateway: Gateway) -> None:
    with pytest.raises(anthropic.APIStatusError):
        CALLERS["anthropic"](gateway).ask(CHAT_MODEL, "hello fake:stream_error", stream=True)


# --- streams: the caller's model in every event, the usage chunk only when asked --------------------


@pytest.mark.parametrize("include_usage", [False, True])
def test_chat_stream_usage_chunk_only_when_asked(gateway: Gateway, include_usage: bool) -> None:
    body: dict[str, Any] = {
        "model": MESSAGES_MODEL,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    result = gateway.stream("/v1/chat/completions", body)
    chunks = [e.json() for e in result.events if e.data != "[DONE]"]
    assert result.events[-1].data == "[DONE]"
    assert all(c["model"] == MESSAGES_MODEL for c in chunks)
    usage = [c for c in chunks if c.get("usage")]
    assert (len(usage) == 1) is include_usage
    if include_usage:
        assert usage[0]["choices"] == [] and usage[0]["usage"]["prompt_tokens"] == 1


@pytest.mark.parametrize("caller", ["anthropic", "openai_responses"])
def test_every_stream_event_carries_the_callers_model(gateway: Gateway, caller: str) -> None:
    body: dict[str, Any] = {"model": CHAT_MODEL, "stream": True, "max_tokens": 20}
    if caller == "openai_responses":
        body = {"model": CHAT_MODEL, "stream": True, "input": "hi"}
    else:
        body["messages"] = [{"role": "user", "content": "hi"}]
    result = gateway.stream(PATH_OF[caller], body)
    models = [
        (e.json().get("message") or e.json().get("response") or {}).get("model")
        for e in result.events
        if e.event in ("message_start", "response.created", "response.in_progress", "response.completed")
    ]
    assert models and set(models) == {CHAT_MODEL}


# --- usage events ------------------------------------------------------------------------------------


def wait_event(gateway: Gateway, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        events = gateway.relay.control.get("/api/usage/events", params={"limit": 1000}).json()["events"]
        found = [e for e in events if e["request_id"] == request_id]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no usage event for {request_id}"
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True])
def test_usage_event_records_inbound_shape_and_adapter(gateway: Gateway, stream: bool) -> None:
    body = {
        "model": MESSAGES_MODEL,
        "stream": stream,
        "messages": [{"role": "user", "content": "hello fake:cached=1"}],
    }
    if stream:
        request_id = gateway.stream("/v1/chat/completions", body).headers["x-relay-request-id"]
    else:
        response = gateway.post("/v1/chat/completions", body)
        assert response.status_code == 200, response.text
        request_id = response.headers["x-relay-request-id"]
    event = wait_event(gateway, request_id)
    assert (event["inbound_shape"], event["adapter"], event["streamed"]) == ("openai", "anthropic", stream)
    assert (event["input_tokens"], event["output_tokens"], event["cached_input_tokens"]) == (2, 3, 1)
    assert event["cost_nanos"] is not None and event["status"] == 200
