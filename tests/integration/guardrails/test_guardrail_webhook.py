"""SPEC §20's webhook matcher over HTTP: the webhook is sent the stage, texts, model, project and request
id; its ``allow``, ``block`` and ``redact`` answers decide; a timeout, a non-2xx or a malformed answer
follows ``fail`` (``open`` allows, ``closed`` blocks) — never a 500 — and is counted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.live import Gateway, metric_value
from tests.integration.guardrails.helpers import guarded_scenario
from tests.integration.guardrails.hook_server import HookServer

PATH = "/v1/chat/completions"


def hook(server: HookServer, kind: str, fail: str = "closed", **extra: Any) -> dict[str, Any]:
    return {"stage": "input", "webhook": {"url": f"{server.base_url}/{kind}", "fail": fail, **extra}}


def ask(gateway: Gateway, key: str, model: str, prompt: str) -> Any:
    return gateway.post(PATH, {"model": model, "messages": [{"role": "user", "content": prompt}]}, key=key)


def test_the_webhook_is_told_what_it_checks_and_its_answers_decide(
    gateway: Gateway, hooks: HookServer
) -> None:
    allowed = guarded_scenario(gateway, hook(hooks, "allow"))
    response = ask(gateway, allowed.key, allowed.model, "hello there")
    assert response.status_code == 200, response.text
    (sent,) = [b for b in hooks.bodies("allow") if b["request_id"] == response.headers["x-relay-request-id"]]
    assert sent["stage"] == "input" and sent["texts"] == ["hello there"] and sent["model"] == allowed.model
    assert sent["project_id"].startswith("prj_")

    blocked = guarded_scenario(gateway, {**hook(hooks, "block"), "message": "policy says no"})
    refused = ask(gateway, blocked.key, blocked.model, "hello")
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].endswith(": policy says no")

    redacted = guarded_scenario(gateway, hook(hooks, "redact"))
    answer = ask(gateway, redacted.key, redacted.model, "quiet words")
    assert answer.status_code == 200 and "QUIET WORDS" in answer.text


@pytest.mark.parametrize("kind", ["garbage", "wrong", "status", "slow"])
@pytest.mark.parametrize("fail", ["open", "closed"])
def test_a_failing_webhook_follows_its_fail_mode_never_a_500(
    gateway: Gateway, hooks: HookServer, kind: str, fail: str
) -> None:
    s = guarded_scenario(gateway, hook(hooks, kind, fail, timeout_ms=300))
    name = gateway.get("policies", s.policy)["guardrails"][0]
    before = metric_value(gateway.metrics(), "relay_guardrail_webhook_failures_total", guardrail=name)
    response = ask(gateway, s.key, s.model, "anything")
    assert response.status_code == (200 if fail == "open" else 400), response.text
    if fail == "closed":
        assert response.json()["error"]["code"] == "guardrail_blocked"
    after = metric_value(gateway.metrics(), "relay_guardrail_webhook_failures_total", guardrail=name)
    assert after - before == 1


def test_an_output_webhook_sees_the_answer(gateway: Gateway, hooks: HookServer) -> None:
    s = guarded_scenario(gateway, {**hook(hooks, "redact"), "stage": "output"})
    answer = ask(gateway, s.key, s.model, "loud reply")
    assert answer.status_code == 200 and "ECHO: LOUD REPLY" in answer.text
