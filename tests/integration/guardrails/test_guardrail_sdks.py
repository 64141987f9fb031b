"""SPEC §20 with the official SDKs through ``relay serve``, both shapes, whole and streamed: input
redaction, output redaction of a match the fake splits across stream events, an output block that ends
a stream with the shape's error event (nothing after it) or answers 422 before any event."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from tests.fixtures.live import Gateway
from tests.integration.cache.helpers import ant, oai
from tests.integration.guardrails.helpers import events_of, guarded_scenario

KEY = {"regex": [r"sk-[a-z0-9]{8}"]}
LONG = " ".join(f"word{i}" for i in range(45))  # an answer longer than the 256-character window


def chat(gateway: Gateway, key: str, model: str, prompt: str, *, stream: bool) -> str:
    with oai(gateway, key) as client:
        messages: Any = [{"role": "user", "content": prompt}]
        if not stream:
            answer = client.chat.completions.create(model=model, messages=messages)
            return answer.choices[0].message.content or ""
        chunks = client.chat.completions.create(model=model, messages=messages, stream=True)
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def message(gateway: Gateway, key: str, model: str, prompt: str, *, stream: bool) -> str:
    with ant(gateway, key) as client:
        messages: Any = [{"role": "user", "content": prompt}]
        if not stream:
            answer = client.messages.create(model=model, max_tokens=400, messages=messages)
            return "".join(getattr(b, "text", "") for b in answer.content)
        with client.messages.stream(model=model, max_tokens=400, messages=messages) as events:
            return "".join(events.text_stream)


CALLS = {"openai": chat, "anthropic": message}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("shape", sorted(CALLS))
def test_sdk_input_and_output_redaction(gateway: Gateway, shape: str, stream: bool) -> None:
    s = guarded_scenario(
        gateway,
        {"stage": "input", "action": "redact", "pii": ["email"]},
        {"stage": "output", "action": "redact", **KEY},
        adapter=shape,
    )
    text = CALLS[shape](
        gateway, s.key, s.model, f"mail ann@example.com key sk-abcdef12 {LONG}", stream=stream
    )
    assert "ann@example.com" not in text and "[REDACTED:email]" in text
    assert "sk-abcdef12" not in text and "[REDACTED]" in text
    assert text.rstrip().endswith("word44")
    (event,) = events_of(gateway, s.policy, 1)
    assert [(g["stage"], g["action"]) for g in event["guardrails"]] == [
        ("input", "redact"),
        ("output", "redact"),
    ]


@pytest.mark.parametrize("shape", sorted(CALLS))
def test_sdk_stream_blocked_mid_way_ends_with_the_error_event(gateway: Gateway, shape: str) -> None:
    s = guarded_scenario(
        gateway,
        {"stage": "output", "action": "block", "regex": ["forbidden"], "message": "no"},
        adapter=shape,
    )
    prompt = f"{LONG} forbidden {LONG}"
    seen: list[str] = []
    with pytest.raises((openai.APIError, anthropic.APIError)) as raised:
        if shape == "openai":
            with oai(gateway, s.key) as client:
                stream = client.chat.completions.create(
                    model=s.model, messages=[{"role": "user", "content": prompt}], stream=True
                )
                for c in stream:
                    seen.append(c.choices[0].delta.content or "" if c.choices else "")
        else:
            with (
                ant(gateway, s.key) as client,
                client.messages.stream(
                    model=s.model, max_tokens=400, messages=[{"role": "user", "content": prompt}]
                ) as events,
            ):
                for piece in events.text_stream:
                    seen.append(piece)
    assert "guardrail_blocked" in str(raised.value)
    assert "forbidden" not in "".join(seen) and "word0" in "".join(seen)
    (event,) = events_of(gateway, s.policy, 1)
    assert event["error_kind"] == "guardrail_blocked" and event["status"] == 200


@pytest.mark.parametrize("shape", sorted(CALLS))
def test_a_stream_blocked_before_its_first_event_is_a_422(gateway: Gateway, shape: str) -> None:
    s = guarded_scenario(
        gateway, {"stage": "output", "action": "block", "regex": ["forbidden"]}, adapter=shape
    )
    path, body = (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "forbidden"}]})
        if shape == "openai"
        else (
            "/anthropic/v1/messages",
            {"max_tokens": 50, "messages": [{"role": "user", "content": "forbidden"}]},
        )
    )
    answer = gateway.stream(path, {"model": s.model, "stream": True, **body}, key=s.key)
    assert answer.status == 422
    assert answer.headers["content-type"].startswith("application/json")
