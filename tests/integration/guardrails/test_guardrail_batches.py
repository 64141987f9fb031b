"""SPEC §20 for batch items (the live plane's step, written once): an input block discards the item with
``guardrail blocked: <name>`` before any upstream call, an output block discards it (never
``completed``) with the upstream call priced, a redaction completes it with the redacted answer; the
usage events list what acted."""

from __future__ import annotations

from typing import Any

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.integration.batch_api.helpers import item_events, results, submit, wait_finished
from tests.integration.guardrails.helpers import guarded_scenario


def chat(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}]}


def test_batch_items_are_blocked_and_redacted_like_live_requests(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = guarded_scenario(
        gateway,
        {"stage": "input", "action": "block", "regex": ["sk-[a-z0-9]{8}"]},
        {"stage": "input", "action": "redact", "pii": ["email"]},
        {"stage": "output", "action": "block", "regex": ["forbidden"]},
    )
    names = gateway.get("policies", s.policy)["guardrails"]
    items = [
        chat(s.model, "key sk-abcdef12"),
        chat(s.model, "mail ann@example.com"),
        chat(s.model, "say forbidden"),
        chat(s.model, "plain words"),
    ]
    batch_id = submit(gateway, "openai", items, key=s.key)
    wait_finished(gateway, batch_id, key=s.key)
    answers = {r["idx"]: r for r in results(gateway, batch_id, key=s.key)}
    assert answers[0]["state"] == "discarded" and answers[0]["error"] == f"guardrail blocked: {names[0]}"
    assert answers[1]["state"] == "completed"
    assert "[REDACTED:email]" in answers[1]["response"]["choices"][0]["message"]["content"]
    assert answers[2]["state"] == "discarded" and answers[2]["error"] == f"guardrail blocked: {names[2]}"
    assert answers[3]["state"] == "completed"
    sent = [str(r["body"]) for r in fake.requests() if (r.get("body") or {}).get("model") == s.model]
    assert len(sent) == 3 and not any("sk-abcdef12" in b or "ann@example.com" in b for b in sent)

    events = item_events(gateway, batch_id, 4)
    assert (events[0]["error_kind"], events[0]["status"], events[0]["cost_nanos"]) == (
        "guardrail_blocked",
        0,
        None,
    )
    assert events[0]["guardrails"] == [{"name": names[0], "stage": "input", "action": "block"}]
    assert events[1]["guardrails"] == [{"name": names[1], "stage": "input", "action": "redact"}]
    assert events[2]["error_kind"] == "guardrail_blocked" and events[2]["status"] == 200
    assert events[2]["cost_nanos"] > 0
    assert events[3]["guardrails"] is None and events[3]["error_kind"] is None
