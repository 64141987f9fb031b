"""SPEC §20 on every stream through ``relay serve``: the official ``openai`` SDK's Responses stream (same
shape and translated), ``/v1/generate`` streams, and translated chat/messages streams are redacted (a
match the fake splits across events) and blocked (the shape's error event last, nothing after it; a
422 before any event); an output webhook holds a stream and checks it whole (allow, redact, block, a
timeout under ``fail: open`` and ``closed``). Usage events list what acted, as for whole answers."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.fixtures.live import Gateway, metric_value
from tests.integration.cache.helpers import oai
from tests.integration.guardrails.helpers import events_of, guarded_scenario
from tests.integration.guardrails.hook_server import HookServer
from tests.integration.guardrails.test_guardrail_sdks import LONG, chat, message

KEY = {"regex": [r"sk-[a-z0-9]{8}"]}
BLOCK = {"stage": "output", "action": "block", "regex": ["forbidden"], "message": "no"}
REDACT = {"stage": "output", "action": "redact", **KEY}
MORE = " ".join(f"tail{i}" for i in range(8))


def sse(text: str) -> list[tuple[str | None, Any]]:
    """``(event name, data)`` of each event of an SSE body."""
    out: list[tuple[str | None, Any]] = []
    for raw in text.replace("\r\n", "\n").split("\n\n"):
        lines = raw.split("\n")
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), None)
        data = next((line[5:].strip() for line in lines if line.startswith("data:")), None)
        if data is not None:
            out.append((name, data if data == "[DONE]" else json.loads(data)))
    return out


def responses_stream(gateway: Gateway, key: str, model: str, prompt: str) -> list[Any]:
    with oai(gateway, key) as client:
        return list(client.responses.create(model=model, input=prompt, stream=True))


def streamed_text(events: list[Any]) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


@pytest.mark.parametrize("adapter", ["openai_responses", "openai", "anthropic"])
def test_sdk_responses_stream_is_redacted(gateway: Gateway, adapter: str) -> None:
    s = guarded_scenario(gateway, REDACT, adapter=adapter)
    events = responses_stream(gateway, s.key, s.model, f"key sk-abcdef12 {LONG}")
    text = streamed_text(events)
    assert "sk-abcdef12" not in text and "[REDACTED]" in text and text.endswith("word44")
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == text  # the terminal response repeats the redacted text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    (event,) = events_of(gateway, s.policy, 1)
    assert [(g["stage"], g["action"]) for g in event["guardrails"]] == [("output", "redact")]


@pytest.mark.parametrize("adapter", ["openai_responses", "anthropic"])
def test_sdk_responses_stream_blocked_ends_with_the_error_event(gateway: Gateway, adapter: str) -> None:
    s = guarded_scenario(gateway, BLOCK, adapter=adapter)
    events = responses_stream(gateway, s.key, s.model, f"{LONG} forbidden {MORE}")
    assert events[-1].type == "error" and events[-1].code == "guardrail_blocked"
    assert (
        events[-1].message == f"guardrail_blocked: {gateway.get('policies', s.policy)['guardrails'][0]}: no"
    )
    assert "word0" in streamed_text(events) and "forbidden" not in streamed_text(events)
    assert not any(e.type == "response.completed" for e in events)
    with pytest.raises(openai.UnprocessableEntityError) as early:  # found before the first event
        responses_stream(gateway, s.key, s.model, "forbidden")
    assert early.value.body["code"] == "guardrail_blocked"  # type: ignore[index]
    recorded = events_of(gateway, s.policy, 2)
    assert [(e["error_kind"], e["status"]) for e in recorded] == [("guardrail_blocked", 200)] * 2
    assert [(g["stage"], g["action"]) for g in recorded[0]["guardrails"]] == [("output", "block")]


def generate(gateway: Gateway, key: str, model: str, prompt: str) -> Any:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    return gateway.post("/v1/generate", body, key=key)


@pytest.mark.parametrize("adapter", ["openai", "anthropic", "openai_responses"])
def test_generate_stream_is_redacted_and_blocked(gateway: Gateway, adapter: str) -> None:
    s = guarded_scenario(gateway, REDACT, BLOCK, adapter=adapter)
    answer = generate(gateway, s.key, s.model, f"key sk-abcdef12 {LONG}")
    assert answer.status_code == 200 and "sk-abcdef12" not in answer.text
    events = sse(answer.text)
    text = "".join(d["text"] for name, d in events if name == "delta")
    assert "[REDACTED]" in text and text.endswith("word44") and events[-1][0] == "done"

    blocked = generate(gateway, s.key, s.model, f"{LONG} forbidden {MORE}")
    assert blocked.status_code == 200 and "forbidden" not in blocked.text
    events = sse(blocked.text)
    name, last = events[-1]
    assert name == "error" and last["code"] == "guardrail_blocked" and last["stage"] == "output"
    assert "word0" in "".join(d["text"] for n, d in events if n == "delta")
    assert "done" not in [n for n, _ in events]

    early = generate(gateway, s.key, s.model, "forbidden")
    assert early.status_code == 422 and early.headers["content-type"].startswith("application/json")
    assert early.json()["error"]["code"] == "guardrail_blocked" and early.json()["error"]["stage"] == "output"
    kinds = [e["error_kind"] for e in events_of(gateway, s.policy, 3)]
    assert kinds == [None, "guardrail_blocked", "guardrail_blocked"]


@pytest.mark.parametrize(
    ("call", "adapter"),
    [(chat, "anthropic"), (message, "openai")],
    ids=["chat-to-anthropic", "messages-to-openai"],
)
def test_a_translated_stream_is_redacted_and_blocked(gateway: Gateway, call: Any, adapter: str) -> None:
    s = guarded_scenario(gateway, REDACT, BLOCK, adapter=adapter)
    text = call(gateway, s.key, s.model, f"key sk-abcdef12 {LONG}", stream=True)
    assert "sk-abcdef12" not in text and "[REDACTED]" in text and text.rstrip().endswith("word44")
    with pytest.raises(Exception) as raised:
        call(gateway, s.key, s.model, f"{LONG} forbidden {MORE}", stream=True)
    assert "guardrail_blocked" in str(raised.value)
    events = events_of(gateway, s.policy, 2)
    assert [e["error_kind"] for e in events] == [None, "guardrail_blocked"]
    assert [g["action"] for g in events[0]["guardrails"]] == ["redact"]


def hook(server: HookServer, kind: str, fail: str = "closed", **extra: Any) -> dict[str, Any]:
    return {"stage": "output", "webhook": {"url": f"{server.base_url}/{kind}", "fail": fail, **extra}}


def chat_stream(gateway: Gateway, key: str, model: str, prompt: str) -> Any:
    body = {"model": model, "stream": True, "messages": [{"role": "user", "content": prompt}]}
    return gateway.post("/v1/chat/completions", body, key=key)


def chat_text(body: str) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for _, c in sse(body)
        if isinstance(c, dict) and c.get("choices")
    )


def test_an_output_webhook_sees_a_streams_whole_answer_and_allows_it(
    gateway: Gateway, hooks: HookServer
) -> None:
    s = guarded_scenario(gateway, hook(hooks, "allow"))
    answer = chat_stream(gateway, s.key, s.model, f"quiet words {LONG}")
    assert answer.status_code == 200 and chat_text(answer.text) == f"Echo: quiet words {LONG}"
    assert sse(answer.text)[-1] == (None, "[DONE]")
    (sent,) = [b for b in hooks.bodies("allow") if b["request_id"] == answer.headers["x-relay-request-id"]]
    assert sent["stage"] == "output" and sent["texts"] == [f"Echo: quiet words {LONG}"]
    (event,) = events_of(gateway, s.policy, 1)
    assert event["error_kind"] is None and not event["guardrails"]


def test_an_output_webhook_redacts_a_stream(gateway: Gateway, hooks: HookServer) -> None:
    s = guarded_scenario(gateway, hook(hooks, "redact"))
    answer = chat_stream(gateway, s.key, s.model, "loud reply")
    assert answer.status_code == 200 and chat_text(answer.text) == "ECHO: LOUD REPLY"
    assert "loud" not in answer.text
    events = responses_stream(gateway, s.key, s.model, "loud reply")  # an openai binding: translated
    assert (
        streamed_text(events) == "ECHO: LOUD REPLY" and events[-1].response.output_text == "ECHO: LOUD REPLY"
    )
    recorded = events_of(gateway, s.policy, 2)
    assert [[(g["stage"], g["action"]) for g in e["guardrails"]] for e in recorded] == [
        [("output", "redact")]
    ] * 2


def test_an_output_webhook_blocks_a_stream_before_its_first_byte(gateway: Gateway, hooks: HookServer) -> None:
    s = guarded_scenario(gateway, {**hook(hooks, "block"), "message": "policy says no"})
    answer = chat_stream(gateway, s.key, s.model, "anything")
    assert answer.status_code == 422 and answer.headers["content-type"].startswith("application/json")
    assert (
        answer.json()["error"]["code"] == "guardrail_blocked" and answer.json()["error"]["stage"] == "output"
    )
    assert answer.json()["error"]["message"].endswith(": policy says no")
    with pytest.raises(openai.UnprocessableEntityError):
        responses_stream(gateway, s.key, s.model, "anything")
    events = events_of(gateway, s.policy, 2)
    assert [(e["error_kind"], e["status"]) for e in events] == [("guardrail_blocked", 200)] * 2


@pytest.mark.parametrize("fail", ["open", "closed"])
def test_a_webhook_timing_out_on_a_stream_follows_its_fail_mode(
    gateway: Gateway, hooks: HookServer, fail: str
) -> None:
    s = guarded_scenario(gateway, hook(hooks, "slow", fail, timeout_ms=300))
    name = gateway.get("policies", s.policy)["guardrails"][0]
    before = metric_value(gateway.metrics(), "relay_guardrail_webhook_failures_total", guardrail=name)
    answer = chat_stream(gateway, s.key, s.model, "anything at all")
    if fail == "open":
        assert answer.status_code == 200 and chat_text(answer.text) == "Echo: anything at all"
    else:
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "guardrail_blocked"
    after = metric_value(gateway.metrics(), "relay_guardrail_webhook_failures_total", guardrail=name)
    assert after - before == 1
