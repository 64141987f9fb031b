"""SPEC §20 over HTTP, both shapes: input guardrails block (400, no upstream call) or redact before the
upstream sees the text; output guardrails block a whole answer (422 with ``error.stage: output``, the
call priced) or redact it; the usage events list what acted and the metric counts it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, metric_value, uniq
from tests.integration.guardrails.helpers import events_of, guarded_scenario

SECRET = {"regex": [r"sk-[a-z0-9]{8}"]}
EMAIL = {"pii": ["email"]}


def chat(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}]}


def messages(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "max_tokens": 100, "messages": [{"role": "user", "content": prompt}]}


SHAPES = {
    "openai": ("/v1/chat/completions", chat),
    "anthropic": ("/anthropic/v1/messages", messages),
}


def sent_to_upstream(fake: FakeUpstream, model: str) -> list[dict[str, Any]]:
    return [r["body"] for r in fake.requests() if (r.get("body") or {}).get("model") == model]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("matcher", [SECRET, EMAIL], ids=["regex", "pii"])
def test_an_input_block_answers_400_in_the_callers_shape_and_calls_no_upstream(
    gateway: Gateway, fake: FakeUpstream, shape: str, matcher: dict[str, Any]
) -> None:
    s = guarded_scenario(
        gateway, {"stage": "input", "action": "block", "message": "no", **matcher}, adapter=shape
    )
    path, build = SHAPES[shape]
    prompt = "my key is sk-abcdef12 ok" if "regex" in matcher else "mail me at ann@example.com please"
    response = gateway.post(path, build(s.model, prompt), key=s.key)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"].startswith("guardrail_blocked: gr-") and error["message"].endswith(": no")
    if shape == "anthropic":
        assert error["type"] == "invalid_request_error"
    else:
        assert error["code"] == "guardrail_blocked"
    assert sent_to_upstream(fake, s.model) == []
    (event,) = events_of(gateway, s.policy, 1)
    assert (event["error_kind"], event["status"], event["cost_nanos"]) == ("guardrail_blocked", 0, None)
    assert event["guardrails"] == [
        {"name": error["message"].split(": ")[1], "stage": "input", "action": "block"}
    ]
    allowed = gateway.post(path, build(s.model, "nothing to see"), key=s.key)
    assert allowed.status_code == 200, allowed.text


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_input_redaction_is_what_the_upstream_sees(
    gateway: Gateway, fake: FakeUpstream, shape: str
) -> None:
    s = guarded_scenario(
        gateway,
        {"stage": "input", "action": "redact", **SECRET},
        {"stage": "input", "action": "redact", **EMAIL},
        adapter=shape,
    )
    path, build = SHAPES[shape]
    before = gateway.metrics()
    response = gateway.post(path, build(s.model, "key sk-abcdef12 and ann@example.com"), key=s.key)
    assert response.status_code == 200, response.text
    (sent,) = sent_to_upstream(fake, s.model)
    text = str(sent["messages"])
    assert "sk-abcdef12" not in text and "ann@example.com" not in text
    assert "[REDACTED]" in text and "[REDACTED:email]" in text
    assert "sk-abcdef12" not in response.text  # the echo answers the redacted prompt
    (event,) = events_of(gateway, s.policy, 1)
    assert [g["action"] for g in event["guardrails"]] == ["redact", "redact"]
    assert event["error_kind"] is None and event["status"] == 200
    after = gateway.metrics()
    name = event["guardrails"][0]["name"]
    counted = metric_value(after, "relay_guardrail_actions_total", guardrail=name, action="redact")
    assert (
        counted - metric_value(before, "relay_guardrail_actions_total", guardrail=name, action="redact") == 1
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_output_block_is_a_422_never_a_200_and_the_call_is_priced(
    gateway: Gateway, fake: FakeUpstream, shape: str
) -> None:
    s = guarded_scenario(
        gateway, {"stage": "output", "action": "block", "regex": ["forbidden"]}, adapter=shape
    )
    path, build = SHAPES[shape]
    response = gateway.post(path, build(s.model, "say forbidden words"), key=s.key)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["stage"] == "output" and error["message"].startswith("guardrail_blocked: ")
    assert "forbidden" not in error["message"]
    assert len(sent_to_upstream(fake, s.model)) == 1  # the input stage let it through
    (event,) = events_of(gateway, s.policy, 1)
    assert (event["error_kind"], event["status"]) == ("guardrail_blocked", 200)
    assert event["cost_nanos"] > 0 and event["output_tokens"] > 0
    assert event["guardrails"][0]["stage"] == "output"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_an_output_redaction_rewrites_the_whole_answer(gateway: Gateway, shape: str) -> None:
    s = guarded_scenario(gateway, {"stage": "output", "action": "redact", "pii": ["us_ssn"]}, adapter=shape)
    path, build = SHAPES[shape]
    response = gateway.post(path, build(s.model, "number 123-45-6789 here"), key=s.key)
    assert response.status_code == 200, response.text
    assert "123-45-6789" not in response.text and "[REDACTED:us_ssn]" in response.text


def test_a_policy_without_guardrails_passes_matching_text(gateway: Gateway) -> None:
    s = gateway.scenario()
    gateway.create("guardrails", {"name": uniq("gr"), "stage": "input", **SECRET})  # attached to nothing
    response = gateway.post("/v1/chat/completions", chat(s.model, "sk-abcdef12"), key=s.key)
    assert response.status_code == 200 and "sk-abcdef12" in response.text
