"""Editing the catalog and self-service in a real Chromium (SPEC §16): each kind of §2 created, edited
and deleted through the forms at ``/ui/edit`` with the control API read back after each step, the
API's validation messages shown next to the form, delete and revoke asked twice (refused, then
accepted), every change in the audit log with the admin as actor, and a user's own key (made at
``/ui/me``) and inference token working on the inference plane.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.dashboard.conftest import shot
from tests.e2e.dashboard.helpers import audit, new_member, sign_in, sign_in_as
from tests.fixtures.gateway import HOST_OPENAI
from tests.fixtures.live import Gateway, uniq

EXPECTED_REFUSALS = ["400", "403", "404", "409", "422"]


def api(gw: Gateway, path: str) -> Any:
    response = gw.relay.api("GET", path)
    return response.status_code, response.json()


def submit_form(page: Any, values: dict[str, Any], button: str) -> None:
    """Fill the visible edit form (text, select, textarea, checkbox by name) and press ``button``."""
    form = page.locator("form.edit")
    for name, value in values.items():
        field = form.locator(f"[name='{name}']")
        tag = field.evaluate("e => e.tagName + ':' + (e.type || '')")
        if tag == "SELECT:select-one":
            field.select_option(value)
        elif tag == "INPUT:checkbox":
            field.set_checked(bool(value))
        else:
            field.fill(value if isinstance(value, str) else json.dumps(value))
    form.locator(f"button:text('{button}')").click()


def audit_actions(gw: Gateway, kind: str, object_id: str) -> list[tuple[str, str]]:
    page = gw.relay.control.get("/api/audit", params={"kind": kind, "limit": "1000"})
    assert page.status_code == 200, page.text
    return [(e["action"], e["actor"]["kind"]) for e in page.json()["items"] if e["ref"] == object_id]


def delete_with_confirmation(page: Any, gw: Gateway, plural: str, object_id: str) -> None:
    """The delete link asks first: "No, keep it" changes nothing; "Yes, delete" deletes."""
    page.goto(f"/ui/edit/{plural}/{object_id}")
    page.locator("a.danger").click()
    page.wait_for_selector("h1:text('Delete')")
    page.click("text=No, keep it")
    page.wait_for_selector("form.edit")
    assert api(gw, f"/api/{plural}/{object_id}")[0] == 200
    page.locator("a.danger").click()
    page.click("button:text('Yes, delete')")
    page.wait_for_selector("[data-testid=notice]:text('Deleted.')")
    assert api(gw, f"/api/{plural}/{object_id}")[0] == 404


def test_policy_create_edit_delete_with_errors_shown(
    page: Any, dash_gw: Gateway, request: pytest.FixtureRequest
) -> None:
    request.node.expected_problems = EXPECTED_REFUSALS
    name = uniq("pol")
    sign_in(page)
    page.goto("/ui/edit/policies")
    rules = {"rules": [{"meter": "requests", "limit": 60, "window": "1m"}]}
    submit_form(
        page,
        {"name": name, "models": "*", "rate_limit": rules, "cache": {"ttl": "1h"}},
        "Create policy",
    )
    page.wait_for_selector("[data-testid=notice]")
    status, policy = api(dash_gw, f"/api/policies/{name}")
    assert status == 200 and policy["models"] == ["*"] and policy["rate_limit"]["rules"][0]["limit"] == 60
    assert policy["cache"]["ttl"] == "1h" and policy["enabled"] is True

    # Not JSON: the form says which field; then the API's own 422 for the cache block, typed text kept.
    submit_form(page, {"fallbacks": "{not json"}, "Save")
    assert "fallbacks: not valid JSON" in page.locator("[role=alert]").inner_text()
    submit_form(page, {"fallbacks": "", "cache": {"ttl": "forever"}}, "Save")
    alert = page.locator("[role=alert]").inner_text()
    assert alert.startswith("cache") and "forever" in page.locator("textarea[name=cache]").input_value()
    shot(page, "edit-policy-error")
    assert api(dash_gw, f"/api/policies/{name}")[1]["cache"]["ttl"] == "1h"  # nothing half-written

    submit_form(
        page,
        {
            "cache": "",
            "key_selection": "round_robin",
            "fallbacks": {"live-chat": ["live-embed"]},
            "batch": {"pacing": "wait", "live_reserve": 0.2},
        },
        "Save",
    )
    page.wait_for_selector("[data-testid=notice]:text('saved')")
    policy = api(dash_gw, f"/api/policies/{name}")[1]
    assert policy["key_selection"] == "round_robin" and policy["fallbacks"] == {"live-chat": ["live-embed"]}
    assert policy["batch"]["pacing"] == "wait" and policy["cache"] is None
    assert page.locator("textarea[name=fallbacks]").input_value().count("live-embed") == 1

    delete_with_confirmation(page, dash_gw, "policies", policy["id"])
    assert audit_actions(dash_gw, "Policy", policy["id"]) == [
        ("delete", "admin_token"),
        ("update", "admin_token"),
        ("create", "admin_token"),
    ]


def test_model_and_binding_through_forms_serve_inference(
    page: Any, dash_gw: Gateway, request: pytest.FixtureRequest
) -> None:
    request.node.expected_problems = EXPECTED_REFUSALS
    model, binding = uniq("mdl"), uniq("bnd")
    sign_in(page)
    page.goto("/ui/edit/models")
    submit_form(
        page, {"name": model, "provider": "openai", "aliases": f"{model}-a, {model}-b"}, "Create model"
    )
    page.wait_for_selector("[data-testid=notice]")
    assert api(dash_gw, f"/api/models/{model}")[1]["aliases"] == [f"{model}-a", f"{model}-b"]

    page.goto("/ui/edit/bindings")
    pricing = {"input": 1.0, "output": 2.0}
    submit_form(
        page,
        {"name": binding, "model": model, "host": "no-such-host", "adapter": "openai", "pricing": pricing},
        "Create binding",
    )
    assert "no-such-host" in page.locator("[role=alert]").inner_text()  # the API's unknown-reference answer
    submit_form(page, {"host": HOST_OPENAI, "upstream_name": "gpt-4o-mini"}, "Create binding")
    page.wait_for_selector("[data-testid=notice]")
    found = api(dash_gw, f"/api/bindings/{binding}")[1]
    assert found["host"] == HOST_OPENAI and found["pricing"]["input"] == 1.0
    assert dash_gw.chat(f"{model}-b").status_code == 200  # the module key's policy grants every model

    submit_form(page, {"pricing": {"input": 3.0, "output": 4.0}, "enabled": False}, "Save")
    page.wait_for_selector("[data-testid=notice]:text('saved')")
    found = api(dash_gw, f"/api/bindings/{binding}")[1]
    assert found["pricing"]["output"] == 4.0 and found["enabled"] is False

    # The model is still bound: its delete is refused with the API's 409, shown on the confirm page.
    model_id = api(dash_gw, f"/api/models/{model}")[1]["id"]
    page.goto(f"/ui/edit/models/{model_id}/delete")
    page.click("button:text('Yes, delete')")
    assert page.locator("[role=alert]").count() == 1
    assert api(dash_gw, f"/api/models/{model}")[0] == 200
    delete_with_confirmation(page, dash_gw, "bindings", found["id"])
    delete_with_confirmation(page, dash_gw, "models", model_id)


def other_kinds(gw: Gateway) -> list[tuple[str, str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(plural, button, create form, edit form, what the API then shows) for the remaining kinds."""
    return [
        ("teams", "team", {"display_name": "Team A"}, {"display_name": "Team B"}, {"display_name": "Team B"}),
        (
            "hosts",
            "host",
            {"base_url": "https://a.example.com"},
            {"base_url": "https://b.example.com", "enabled": False},
            {"base_url": "https://b.example.com", "enabled": False},
        ),
        (
            "host-keys",
            "host key",
            {"host": HOST_OPENAI, "value": "hk-secret-from-the-form"},
            {"enabled": False},
            {"enabled": False, "host": HOST_OPENAI},
        ),
        (
            "projects",
            "project",
            {"team": "live-team"},
            {"default_policy": gw.policy},
            {"default_policy": gw.policy},
        ),
        (
            "service-accounts",
            "service account",
            {"project": gw.project},
            {"enabled": False},
            {"enabled": False},
        ),
        (
            "users",
            "user",
            {"email": f"{uniq('e')}@example.com", "password": "long enough pw"},
            {"memberships": [{"project": gw.project}]},
            {"enabled": True},
        ),
        (
            "webhooks",
            "webhook",
            {"url": "https://hooks.example.com/x", "events": "batch.completed"},
            {"url": "https://hooks.example.com/y"},
            {"url": "https://hooks.example.com/y", "events": ["batch.completed"]},
        ),
    ]


def test_every_other_kind_create_edit_delete(page: Any, dash_gw: Gateway) -> None:
    sign_in(page)
    for plural, title, create, change, expected in other_kinds(dash_gw):
        name = uniq(plural[:4])
        page.goto(f"/ui/edit/{plural}")
        submit_form(page, {"name": name, **create}, f"Create {title}")
        page.wait_for_selector("[data-testid=notice]")
        status, made = api(dash_gw, f"/api/{plural}/{name}")
        assert status == 200, (plural, made)
        submit_form(page, change, "Save")
        page.wait_for_selector("[data-testid=notice]:text('saved')")
        found = api(dash_gw, f"/api/{plural}/{name}")[1]
        assert {k: found.get(k) for k in expected} == expected, plural
        if plural == "users":
            assert [m["project"] for m in found["memberships"]] == [dash_gw.project]
        page.goto(f"/ui/edit/{plural}/{made['id']}")
        submit_form(page, {}, "Save")  # the form as shown, saved unchanged: accepted, nothing changes
        page.wait_for_selector("[data-testid=notice]:text('saved')")
        again = api(dash_gw, f"/api/{plural}/{name}")[1]
        assert {k: v for k, v in again.items() if k != "updated_at"} == {
            k: v for k, v in found.items() if k != "updated_at"
        }, plural
        html = page.content()
        assert "hk-secret-from-the-form" not in html and "long enough pw" not in html  # write-only
        delete_with_confirmation(page, dash_gw, plural, made["id"])
    stored = api(dash_gw, f"/api/host-keys/{HOST_OPENAI}-k1")[1]
    assert "value" not in stored  # and the API never renders it either


def test_webhook_secret_is_shown_once(page: Any, dash_gw: Gateway) -> None:
    name = uniq("wh")
    sign_in(page)
    page.goto("/ui/edit/webhooks")
    submit_form(
        page, {"name": name, "url": "https://hooks.example.com/once", "enabled": False}, "Create webhook"
    )
    secret = page.locator("[data-testid=plaintext]").inner_text()
    assert secret.startswith("whsec_")
    page.goto(f"/ui/edit/webhooks/{name}")
    assert secret not in page.content()


def test_admin_key_revoke_asks_first(page: Any, dash_gw: Gateway) -> None:
    key_id, plaintext = dash_gw.mint_key()
    name = api(dash_gw, f"/api/keys/{key_id}")[1]["name"]
    sign_in(page)
    page.goto("/ui/keys")
    page.locator(f"tr[data-key='{name}'] button:text('Revoke')").click()
    page.wait_for_selector(f"h1:text('Revoke key {name}?')")
    page.click("text=No, keep it")
    assert dash_gw.client.get("/v1/models", headers=dash_gw.auth(plaintext)).status_code == 200
    page.locator(f"tr[data-key='{name}'] button:text('Revoke')").click()
    page.click("button:text('Yes, revoke')")
    page.wait_for_selector(f"tr[data-key='{name}'] >> text=revoked")
    assert dash_gw.client.get("/v1/models", headers=dash_gw.auth(plaintext)).status_code == 401


def test_user_self_service_key_and_token(page: Any, dash_gw: Gateway, request: pytest.FixtureRequest) -> None:
    request.node.expected_problems = EXPECTED_REFUSALS
    email, password = new_member(dash_gw)
    other_id, _ = dash_gw.mint_key()
    sign_in_as(page, email, password)
    page.click("text=My keys and tokens")
    name = uniq("mine")
    page.fill("#key-name", name)
    page.click("button:text('Create key')")
    plaintext = page.locator("[data-testid=plaintext]").inner_text()
    assert plaintext.startswith("sk-relay-")
    key = api(dash_gw, f"/api/keys/{name}")[1]
    assert key["principal_kind"] == "user" and key["principal"] and key["project"] == dash_gw.project
    assert dash_gw.chat(key=plaintext).status_code == 200
    page.goto("/ui/me")
    assert plaintext not in page.content() and page.locator(f"tr[data-key='{name}']").count() == 1
    for _ in range(40):  # their own usage, by model, once the request's usage event is written
        if page.locator("tr[data-model='live-chat']").count():
            break
        page.wait_for_timeout(250)
        page.goto("/ui/me")
    assert page.locator("tr[data-model='live-chat'] td").nth(1).inner_text() == "1"

    page.fill("#token-ttl", "0")
    page.click("button:text('Mint token')")
    assert "ttl_seconds" in page.locator("[role=alert]").inner_text()  # the API's 400, shown
    page.fill("#token-ttl", "600")
    page.click("button:text('Mint token')")
    token = page.locator("[data-testid=token]").inner_text()
    assert dash_gw.client.get("/v1/models", headers=dash_gw.auth(token)).status_code == 200

    page.goto("/ui/me")
    page.locator(f"tr[data-key='{name}'] button:text('Revoke')").click()
    page.click("text=No, keep it")
    assert dash_gw.chat(key=plaintext).status_code == 200
    page.locator(f"tr[data-key='{name}'] button:text('Revoke')").click()
    page.click("button:text('Yes, revoke')")
    page.wait_for_selector(f"tr[data-key='{name}'] >> text=revoked")
    assert dash_gw.chat(key=plaintext).status_code == 401
    assert ("create", "user") in audit_actions(dash_gw, "Key", key["id"])

    # Users only their own: no catalog editor, and another principal's key is not there for them.
    assert page.goto("/ui/edit/policies").status == 403
    csrf = page.locator("input[name=csrf]").first.input_value()
    answer = page.request.post(f"/ui/me/keys/{other_id}/revoke", form={"csrf": csrf, "confirm": "yes"})
    assert answer.status == 404
    assert api(dash_gw, f"/api/keys/{other_id}")[1]["revoked_at"] is None


def test_edit_pages_are_accessible(page: Any, dash_gw: Gateway) -> None:
    sign_in(page)
    policy_id = api(dash_gw, f"/api/policies/{dash_gw.policy}")[1]["id"]
    for url in [
        "/ui/edit",
        "/ui/edit/policies",
        f"/ui/edit/policies/{policy_id}",
        f"/ui/edit/policies/{policy_id}/delete",
    ]:
        audit(page, url)
    page.goto(f"/ui/edit/policies/{policy_id}")
    assert page.locator("form.edit label").count() >= 10  # every input has its label


def test_me_page_is_accessible(page: Any, dash_gw: Gateway) -> None:
    email, password = new_member(dash_gw)
    sign_in_as(page, email, password)
    audit(page, "/ui/me")
