"""What the other Chromium tests left unproven of SPEC §16, each through real clicks with the control
API read back: the Guardrail kind and a policy holding every block at once (rules with a budget,
fallbacks, ``batch``, ``cache``, ``guardrails``) created, edited and deleted through the forms; a
webhook's "Send test event" and "Redeliver" reaching a real receiver; the "in progress" badge of a
running batch; a batch submitted after the list was opened appearing on it; and no serious axe-core
violation on every editor page of every kind, the confirm pages, and the pages that show a plaintext
or an error."""

from __future__ import annotations

import time
from typing import Any

import pytest

from relay.control.dashboard.edit_forms import TITLES
from tests.e2e.dashboard.conftest import shot
from tests.e2e.dashboard.helpers import AXE, AXE_RUN, audit, new_member, sign_in, sign_in_as
from tests.e2e.dashboard.test_browser_edit import (
    EXPECTED_REFUSALS,
    api,
    audit_actions,
    delete_with_confirmation,
    submit_form,
)
from tests.fixtures.live import Gateway, uniq
from tests.integration.batch_api.helpers import chat_item, submit
from tests.integration.webhooks.receiver import Receiver


def test_a_guardrail_and_a_policy_with_every_block(
    page: Any, dash_gw: Gateway, request: pytest.FixtureRequest
) -> None:
    request.node.expected_problems = EXPECTED_REFUSALS
    guard, name = uniq("gr"), uniq("pol")
    sign_in(page)
    page.goto("/ui/edit/guardrails")
    submit_form(
        page, {"name": guard, "stage": "input", "action": "redact", "regex": '["("]'}, "Create guardrail"
    )
    assert page.locator("[role=alert]").inner_text().startswith("regex")  # the API's 422, shown
    assert api(dash_gw, f"/api/guardrails/{guard}")[0] == 404  # nothing written
    submit_form(page, {"regex": "", "pii": ["email"]}, "Create guardrail")
    page.wait_for_selector("[data-testid=notice]")
    made = api(dash_gw, f"/api/guardrails/{guard}")[1]
    assert (made["stage"], made["action"], made["pii"], made["regex"]) == ("input", "redact", ["email"], None)
    submit_form(
        page,
        {"pii": "", "regex": ["sk-[A-Za-z0-9]{20,}"], "action": "block", "message": "no keys here"},
        "Save",
    )
    page.wait_for_selector("[data-testid=notice]:text('saved')")
    edited = api(dash_gw, f"/api/guardrails/{guard}")[1]
    assert (edited["action"], edited["regex"], edited["pii"], edited["message"]) == (
        "block",
        ["sk-[A-Za-z0-9]{20,}"],
        None,
        "no keys here",
    )

    rules = [
        {"meter": "requests", "limit": 60, "window": "1m"},
        {"meter": "cost_usd", "limit": 5, "window": "1d"},
    ]
    page.goto("/ui/edit/policies")
    submit_form(
        page,
        {
            "name": name,
            "models": "*",
            "rate_limit": {"rules": rules},
            "fallbacks": {"live-chat": ["live-embed"]},
            "batch": {"pacing": "wait", "live_reserve": 0.25},
            "cache": {"ttl": "1h", "scope": "project"},
            "guardrails": guard,
        },
        "Create policy",
    )
    page.wait_for_selector("[data-testid=notice]")
    policy = api(dash_gw, f"/api/policies/{name}")[1]
    assert [(r["meter"], r["limit"]) for r in policy["rate_limit"]["rules"]] == [
        ("requests", 60),
        ("cost_usd", 5),
    ]
    assert policy["fallbacks"] == {"live-chat": ["live-embed"]} and policy["guardrails"] == [guard]
    assert (policy["batch"]["pacing"], policy["batch"]["live_reserve"]) == ("wait", 0.25)
    assert (policy["cache"]["ttl"], policy["cache"]["scope"]) == ("1h", "project")

    # A budget the API refuses (a negative limit): its message, nothing written.
    bad = [{"meter": "cost_usd", "limit": -1, "window": "1d"}]
    submit_form(page, {"rate_limit": {"rules": bad}}, "Save")
    assert "rate_limit" in page.locator("[role=alert]").inner_text()
    assert api(dash_gw, f"/api/policies/{name}")[1]["rate_limit"] == policy["rate_limit"]
    page.goto(f"/ui/edit/policies/{policy['id']}")
    rules[1]["limit"] = 7
    submit_form(page, {"rate_limit": {"rules": rules}, "batch": {"pacing": "fail"}}, "Save")
    page.wait_for_selector("[data-testid=notice]:text('saved')")
    policy = api(dash_gw, f"/api/policies/{name}")[1]
    assert policy["rate_limit"]["rules"][1]["limit"] == 7 and policy["batch"]["pacing"] == "fail"
    assert policy["guardrails"] == [guard] and policy["cache"]["ttl"] == "1h"  # the rest kept

    # Named by the policy, the guardrail's delete is the API's 409 on the confirm page.
    page.goto(f"/ui/edit/guardrails/{made['id']}/delete")
    page.click("button:text('Yes, delete')")
    assert page.locator("[role=alert]").count() == 1
    assert api(dash_gw, f"/api/guardrails/{guard}")[0] == 200
    delete_with_confirmation(page, dash_gw, "policies", policy["id"])
    delete_with_confirmation(page, dash_gw, "guardrails", made["id"])
    assert [a for a, _ in audit_actions(dash_gw, "Guardrail", made["id"])] == ["delete", "update", "create"]


def test_send_a_test_event_and_redeliver_it(page: Any, dash_gw: Gateway, receiver: Receiver) -> None:
    path = receiver.path()
    name = uniq("wh")
    hook = dash_gw.create("webhooks", {"name": name, "url": receiver.url(path)})
    sign_in(page)
    page.goto(f"/ui/webhooks/{name}")
    page.click("button:text('Send test event')")
    notice = page.locator("[data-testid=notice]").inner_text()
    assert notice.startswith("Test event evt_") and "queued" in notice
    event_id = notice.split()[2]
    [first] = receiver.wait(path, 1)
    assert first.headers["webhook-id"] == event_id and first.json()["type"] == "webhook.test"
    deadline = time.monotonic() + 15
    while True:  # the attempt is recorded once the receiver answered
        page.goto(f"/ui/webhooks/{name}")
        row = page.locator(f"#deliveries tr[data-event='{event_id}']")
        if row.count() and row.locator("[data-testid=outcome]").inner_text() == "delivered":
            break
        assert time.monotonic() < deadline, "the test event's delivery never showed"
        page.wait_for_timeout(200)
    row.locator("button:text('Redeliver')").click()
    assert page.locator("[data-testid=notice]").inner_text() == f"Event {event_id} queued again."
    second = receiver.wait(path, 2)[1]
    assert second.headers["webhook-id"] == event_id and second.body == first.body  # the same event
    deadline = time.monotonic() + 15
    while len(dash_gw.relay.control.get(f"/api/webhooks/{name}/deliveries").json()["items"]) < 2:
        assert time.monotonic() < deadline, "the redelivery was never recorded"
        time.sleep(0.1)
    page.goto(f"/ui/webhooks/{name}")
    assert page.locator(f"#deliveries tr[data-event='{event_id}']").count() == 2
    assert hook["secret"] not in page.content()
    actions = [
        e["action"]
        for e in dash_gw.relay.control.get("/api/audit", params={"kind": "Webhook"}).json()["items"]
        if e["ref"] == hook["id"]
    ]
    assert "test" in actions and "redeliver" in actions


def test_a_running_batch_says_in_progress(page: Any, dash_gw: Gateway) -> None:
    batch_id = submit(dash_gw, "openai", [chat_item(i, fake={"latency_ms": 1000}) for i in range(20)])
    try:
        sign_in(page)
        page.goto(f"/ui/batches/{batch_id}")
        assert page.locator("[data-testid=batch-state]").inner_text() == "in progress"
        page.goto("/ui/batches")
        row = page.locator("#batch-rows tbody tr", has=page.locator(f"a:text-is('{batch_id}')"))
        assert row.locator("[data-testid=batch-state]").inner_text() == "in progress"
    finally:
        dash_gw.client.post(f"/v1/batches/{batch_id}/cancel", headers=dash_gw.auth(None))


def test_a_batch_submitted_later_appears_on_the_open_list(page: Any, dash_gw: Gateway) -> None:
    sign_in(page)
    page.goto("/ui/batches")
    navigations: list[str] = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    batch_id = submit(dash_gw, "openai", [chat_item(0)])  # after the list was opened
    page.wait_for_selector(f"#batch-rows a:text-is('{batch_id}')")  # the list's own polling
    assert navigations == []  # by the live update, not a reload


# What a kind the module's catalog may lack needs to be created (the others are always there).
MINIMAL: dict[str, dict[str, Any]] = {
    "users": {"email": "axe@example.com", "password": "long enough pw"},
    "guardrails": {"stage": "input", "action": "block", "regex": ["x{50}"]},
    "webhooks": {"url": "https://hooks.example.com/axe", "enabled": False},
}


def an_object(gw: Gateway, plural: str) -> str:
    """The id of one object of ``plural`` (made for the test when the catalog has none)."""
    found = gw.relay.api("GET", f"/api/{plural}").json()["items"]
    if found:
        return str(found[0]["id"])
    return str(gw.create(plural, {"name": uniq(plural[:4]), **MINIMAL[plural]})["id"])


def test_every_editor_and_confirm_page_is_accessible(
    page: Any, dash_gw: Gateway, request: pytest.FixtureRequest
) -> None:
    """Each kind's list, one object's form and its delete confirmation; a form showing an error; the
    pages that show a plaintext once; the cancel, revoke and revoke-tokens confirmations; the sign-in
    page's error."""
    request.node.expected_problems = [*EXPECTED_REFUSALS, "401"]
    page.goto("/ui/signin")
    page.fill("#admin_token", "wrong")
    page.click("text=Sign in as admin")
    page.wait_for_selector("[role=alert]")
    _axe_here(page, "signin-error")
    sign_in(page)
    for plural in TITLES:
        ref = an_object(dash_gw, plural)
        for url in (f"/ui/edit/{plural}", f"/ui/edit/{plural}/{ref}", f"/ui/edit/{plural}/{ref}/delete"):
            audit(page, url)
    page.goto("/ui/edit/policies")
    submit_form(page, {"name": uniq("pol"), "models": "*", "fallbacks": "{not json"}, "Create policy")
    page.wait_for_selector("[role=alert]")
    _axe_here(page, "edit-error")
    user = an_object(dash_gw, "users")
    page.goto(f"/ui/edit/users/{user}")
    page.click("button:text('Revoke all inference tokens')")
    page.wait_for_selector("form.confirm")
    _axe_here(page, "revoke-tokens-confirm")

    page.goto("/ui/keys")
    page.fill("input[name=principal]", dash_gw.account)
    page.fill("input[name=name]", uniq("k"))
    page.click("button:text('Create key')")
    page.wait_for_selector("[data-testid=plaintext]")
    _axe_here(page, "key-created")
    page.locator("tr[data-key] button:text('Revoke')").first.click()
    page.wait_for_selector("form.confirm")
    _axe_here(page, "key-revoke-confirm")

    batch_id = submit(dash_gw, "openai", [chat_item(i, fake={"latency_ms": 1000}) for i in range(20)])
    try:
        page.goto(f"/ui/batches/{batch_id}")
        page.click("button:text('Cancel batch')")
        page.wait_for_selector("form.confirm")
        _axe_here(page, "batch-cancel-confirm")
    finally:
        dash_gw.client.post(f"/v1/batches/{batch_id}/cancel", headers=dash_gw.auth(None))

    page.click("button:text('Sign out')")
    email, password = new_member(dash_gw)
    sign_in_as(page, email, password)
    page.goto("/ui/me")
    page.fill("#key-name", uniq("mine"))
    page.click("button:text('Create key')")
    page.wait_for_selector("[data-testid=plaintext]")
    _axe_here(page, "me-key-created")
    page.fill("#token-ttl", "600")
    page.click("button:text('Mint token')")
    page.wait_for_selector("[data-testid=token]")
    _axe_here(page, "me-token-minted")


def _axe_here(page: Any, name: str) -> None:
    """The axe-core audit of the page as it is now (a POST's answer, which a reload would re-post)."""
    page.evaluate(AXE.read_text())
    bad = page.evaluate(AXE_RUN)
    assert not bad, f"{name}:\n" + "\n".join(bad)
    shot(page, f"page-{name}")
