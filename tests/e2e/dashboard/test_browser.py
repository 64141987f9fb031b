"""The dashboard (SPEC §16) in a real headless Chromium against a real ``relay serve``."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.dashboard.conftest import shot
from tests.e2e.dashboard.helpers import audit, new_member, sign_in, sign_in_as
from tests.fixtures.live import CHAT_MODEL, MESSAGES_MODEL, Gateway, uniq
from tests.fixtures.relay_server import ADMIN_TOKEN
from tests.integration.batch_api.helpers import chat_item, submit


def progress(page: Any) -> tuple[int, int]:
    bar = page.locator("#batch-detail progress")
    return int(bar.get_attribute("value")), int(bar.get_attribute("max"))


def progress_and_state(page: Any) -> tuple[int, int, str]:
    """(done, total, state) of the batch page, read in one script run: a live update replaces the
    detail between two separate reads, so progress and state read apart can be of two versions."""
    done, total, state = page.evaluate(
        """() => {
            const bar = document.querySelector("#batch-detail progress");
            const state = document.querySelector("[data-testid=batch-state]");
            return [Number(bar.getAttribute("value")), Number(bar.getAttribute("max")), state.innerText];
        }"""
    )
    return int(done), int(total), str(state)


def test_keyboard_alone_signs_in(page: Any) -> None:
    page.goto("/ui/signin")
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == "admin_token":
            break
    else:
        raise AssertionError("Tab never reached the admin token field")
    page.keyboard.type(ADMIN_TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_selector("h1:text('Overview')")
    page.keyboard.press("Tab")  # the skip link comes first and works from the keyboard
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    shot(page, "overview")


def test_session_cookie_and_refusals(page: Any, dash_gw: Gateway) -> None:
    sign_in(page)
    cookie = next(c for c in page.context.cookies() if c["name"] == "relay_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
    assert ADMIN_TOKEN not in cookie["value"]  # the token itself never goes to the browser
    # A state-changing form without its CSRF token is refused, even with the session cookie.
    forged = page.request.post(
        "/ui/keys", form={"principal_kind": "serviceaccount", "principal": dash_gw.account}
    )
    assert forged.status == 403 and "CSRF" in forged.text()
    assert page.request.post("/ui/batches/b_x/cancel", form={"csrf": "wrong"}).status == 403
    # Signed out: pages send you to sign in, and the API never took the cookie as a credential.
    anonymous = httpx.get(f"{dash_gw.relay.control_url}/ui/keys", follow_redirects=False, timeout=10)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/ui/signin"
    assert (
        httpx.get(f"{dash_gw.relay.control_url}/api/keys", cookies={"relay_ui": cookie["value"]}).status_code
        == 401
    )
    page.goto("/ui/")
    page.click("button:text('Sign out')")
    page.wait_for_url(re.compile(r"/ui/signin$"))
    assert not [c for c in page.context.cookies() if c["name"] == "relay_ui"]
    page.goto("/ui/usage")
    assert page.url.endswith("/ui/signin")  # signed out: every page sends you to sign in
    wrong = page.context.browser.new_context(base_url=dash_gw.relay.control_url)
    try:
        other = wrong.new_page()
        other.goto("/ui/signin")
        other.fill("#admin_token", ADMIN_TOKEN + "x")
        with other.expect_response(lambda r: r.request.method == "POST") as answer:
            other.click("text=Sign in as admin")
        assert answer.value.status == 401
        assert other.locator("[role=alert]").inner_text() == "invalid admin token"
    finally:
        wrong.close()


def test_user_sees_only_their_projects(page: Any, dash_gw: Gateway, request: pytest.FixtureRequest) -> None:
    email, password = new_member(dash_gw)
    team, project = uniq("t"), uniq("pr")
    dash_gw.create("teams", {"name": team, "display_name": "Elsewhere"})
    dash_gw.create("projects", {"name": project, "team": team, "default_policy": dash_gw.policy})
    account = uniq("sa")
    dash_gw.create("service-accounts", {"name": account, "project": project})
    foreign_key = dash_gw.create("keys", {"principal_kind": "serviceaccount", "principal": account})[
        "plaintext"
    ]
    foreign = submit(dash_gw, "openai", [chat_item(0)], key=foreign_key)
    own = submit(dash_gw, "openai", [chat_item(0)])

    sign_in_as(page, email, password)
    assert "Keys" not in page.locator("nav").inner_text()
    page.goto("/ui/batches")
    text = page.locator("#batch-rows").inner_text()
    assert own in text and foreign not in text
    request.node.expected_problems = ["403", "404"]
    assert page.goto("/ui/keys").status == 403  # the control API refuses non-admins too
    assert page.goto(f"/ui/batches/{foreign}").status == 404  # outside their projects: not found
    assert page.goto(f"/ui/usage?project={project}").status == 403


def test_watch_a_batch_run_to_done(page: Any, dash_gw: Gateway) -> None:
    # 2 workers, 16 items of 1 s each: about 8 s of progress to watch, polled every 1.5 s (on a loaded
    # machine signing in and opening the page can take seconds of it).
    batch_id = submit(dash_gw, "openai", [chat_item(i, fake={"latency_ms": 1000}) for i in range(16)])
    sign_in(page)
    assert batch_id in page.locator("#running").inner_text()  # the overview's batches in progress
    page.goto("/ui/batches")
    assert page.locator(f"a:text('{batch_id}')").count() == 1
    assert dash_gw.project in page.locator("#batch-rows").inner_text()  # projects by name
    shot(page, "batches")
    page.goto(f"/ui/batches/{batch_id}")
    seen = []
    deadline = time.monotonic() + 60
    navigations = []
    page.on("framenavigated", lambda frame: navigations.append(frame.url))
    while True:
        done, total, state = progress_and_state(page)
        if not seen or seen[-1] != done:
            seen.append(done)
            if 0 < done < total and len(seen) == 2:
                shot(page, "batch-running")
        if state == "completed":
            break
        assert time.monotonic() < deadline, f"batch never finished on the page; progress seen {seen}"
        time.sleep(0.1)
    done, total = progress(page)
    assert (done, total) == (16, 16)
    assert len(seen) >= 2 and seen == sorted(seen), seen  # it advanced, on the page itself
    assert navigations == []  # by live updates, not reloads
    assert "completed 16" in page.locator("#batch-detail").inner_text()
    assert page.locator("#batch-detail [data-poll]").count() == 0  # polling stopped once done
    with page.expect_download() as download:
        page.click("text=Download results (JSONL)")
    lines = Path(download.value.path()).read_text().splitlines()
    assert [json.loads(line)["state"] for line in lines] == ["completed"] * 16
    shot(page, "batch-done")


def test_cancel_a_batch(page: Any, dash_gw: Gateway) -> None:
    batch_id = submit(dash_gw, "openai", [chat_item(i, fake={"latency_ms": 500}) for i in range(40)])
    sign_in(page)
    page.goto(f"/ui/batches/{batch_id}")
    page.click("button:text('Cancel batch')")
    page.click("text=No, keep it")  # asked first: refusing leaves the batch running
    assert page.locator("[data-testid=batch-state]").inner_text() != "cancelled"
    page.click("button:text('Cancel batch')")
    page.click("button:text('Yes, cancel batch')")
    page.wait_for_selector("[data-testid=batch-state]:text('cancelled')")
    text = page.locator("#batch-detail").inner_text()
    assert re.search(r"cancelled \d+", text), text
    assert page.locator("button:text('Cancel batch')").count() == 0
    view = dash_gw.client.get(f"/v1/batches/{batch_id}", headers=dash_gw.auth(None)).json()
    assert view["Status"] == "cancelled" and view["counts"].get("cancelled", 0) > 0
    page.goto("/ui/batches?state=cancelled")
    assert page.locator(f"a:text('{batch_id}')").count() == 1
    shot(page, "batch-cancelled")


def test_create_rotate_disable_revoke_a_key(page: Any, dash_gw: Gateway) -> None:
    name = uniq("k")
    sign_in(page)
    page.goto("/ui/keys")
    page.fill("input[name=principal]", dash_gw.account)
    page.fill("input[name=name]", name)
    page.click("button:text('Create key')")
    first = page.locator("[data-testid=plaintext]").inner_text()
    assert first.startswith("sk-relay-") and len(first) == 52
    shot(page, "key-created")
    models = lambda key: dash_gw.client.get("/v1/models", headers=dash_gw.auth(key)).status_code  # noqa: E731
    assert models(first) == 200
    page.goto("/ui/keys")  # a later visit never shows the plaintext again
    assert first not in page.content() and page.locator("[data-testid=plaintext]").count() == 0
    assert first[:16] in page.content()  # the prefix is shown

    row = page.locator(f"tr[data-key='{name}']")
    row.locator("input[name=grace_seconds]").fill("3600")
    row.locator("button:text('Rotate')").click()
    second = page.locator("[data-testid=plaintext]").inner_text()
    assert second.startswith("sk-relay-") and second != first
    assert "keeps working until" in page.locator("section.plaintext").inner_text()
    assert models(second) == 200 and models(first) == 200  # the old one is in its grace period
    page.reload()  # the POST answer is not cached; reloading re-asks (dismissed) then a fresh GET
    page.goto("/ui/keys")
    assert second not in page.content() and first not in page.content()
    assert "rotated" in page.locator(f"tr[data-key='{name}']").inner_text()

    page.locator(f"tr[data-key='{name}'] button:text('Disable')").click()
    page.wait_for_selector(f"tr[data-key='{name}'] button:text('Enable')")
    assert "disabled" in page.locator(f"tr[data-key='{name}']").inner_text()
    assert models(second) == 401
    page.locator(f"tr[data-key='{name}'] button:text('Revoke')").click()
    page.click("button:text('Yes, revoke')")  # revoking asks first (test_browser_edit.py covers "no")
    page.wait_for_selector(f"tr[data-key='{name}'] >> text=revoked")
    assert page.locator(f"tr[data-key='{name}'] button").count() == 0


def test_filter_usage_and_download_csv(page: Any, dash_gw: Gateway) -> None:
    for _ in range(3):
        assert dash_gw.chat(CHAT_MODEL).status_code == 200
    body = {"model": MESSAGES_MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    assert dash_gw.post("/anthropic/v1/messages", body).status_code == 200
    deadline = time.monotonic() + 30
    while True:  # live events are written off the response path: wait for them to land
        expected = dash_gw.relay.api("GET", f"/api/usage/events?model={MESSAGES_MODEL}&limit=1000").json()[
            "events"
        ]
        if expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    sign_in(page)
    page.goto("/ui/usage")
    page.fill("input[name=model]", MESSAGES_MODEL)
    page.select_option("select[name=group_by]", "model")
    page.click("button:text('Apply')")
    page.wait_for_url(re.compile(r"model=" + MESSAGES_MODEL))
    events = page.locator("#events tbody tr")
    assert events.count() == len(expected) > 0
    assert CHAT_MODEL not in page.locator("#events").inner_text()
    shot(page, "usage")
    with page.expect_download() as download:
        page.click("[data-testid=csv-link]")
    rows = list(csv.DictReader(io.StringIO(Path(download.value.path()).read_text())))
    assert len(rows) == len(expected)
    assert {r["model"] for r in rows} == {MESSAGES_MODEL}
    assert {r["request_id"] for r in rows} == {e["request_id"] for e in expected}
    # A bad filter is refused as the usage API refuses it.
    refused = page.request.get("/ui/usage?from=yesterday")
    assert refused.status == 400 and "from" in refused.text()


def test_a_tripped_host_key_shows_open(page: Any, dash_gw: Gateway) -> None:
    scenario = dash_gw.scenario(["fail-401"])  # the fake answers 401: an auth failure opens the breaker
    response = dash_gw.chat(scenario.model, key=scenario.key)
    assert response.status_code >= 400
    sign_in(page)
    page.goto("/ui/catalog")
    row = page.locator(f"tr[data-host-key='{scenario.host_keys[0]['name']}']")
    assert row.locator("[data-testid=breaker]").inner_text() == "open"
    assert scenario.host_keys[0]["value"] not in page.content()  # never a key value
    healthy = page.locator("tr[data-host-key='live-openai-k1'] [data-testid=breaker]")
    assert healthy.inner_text() == "closed"
    shot(page, "catalog")


def test_the_catalog_shows_policy_rules_and_current_spend(page: Any, dash_gw: Gateway) -> None:
    """SPEC §16: the catalog page lists each policy's rules and, for budget rules, the current
    window's spend exactly as ``GET /api/policies/{ref}/spend`` answers it."""
    scenario = dash_gw.scenario(rules=[{"meter": "cost_usd", "limit": 5, "window": "1d"}])
    assert dash_gw.chat(scenario.model, key=scenario.key).status_code == 200
    deadline = time.monotonic() + 10
    while True:  # the spend is committed once the answer is out
        rule = dash_gw.relay.api("GET", f"/api/policies/{scenario.policy}/spend").json()["rules"][0]
        if rule["entries"][0]["spent_usd"] > 0:
            break
        assert time.monotonic() < deadline, rule
        time.sleep(0.05)
    entry = rule["entries"][0]
    sign_in(page)
    page.goto("/ui/catalog")
    row = page.locator(f"tr[data-policy='{scenario.policy}']")
    assert "$5.00 per day (shared by the policy)" in row.inner_text()  # the rule itself, as a sentence
    spend = row.locator("[data-testid=spend]").inner_text()
    spent = format(Decimal(str(entry["spent_usd"])).normalize(), "f")
    assert f"${spent} of $5 per 1d" in spend, spend
    assert re.search(r"resets in \d+ (s|min|h)\b", spend), spend  # relative, as every time on the pages
    plain = page.locator("tr[data-policy='live-main'] [data-testid=spend]")
    assert plain.inner_text() == ""  # no budget rule: nothing to show
    shot(page, "catalog-spend")


def test_every_page_is_clean_and_accessible(page: Any, dash_gw: Gateway) -> None:
    """Each page: no console error, no failed request (the ``page`` fixture checks), and no serious or
    critical axe-core violation."""
    batch_id = submit(dash_gw, "openai", [chat_item(0), chat_item(1, model="no-such-model")])
    audit(page, "/ui/signin")
    sign_in(page)
    pages = ["/ui/", "/ui/batches", f"/ui/batches/{batch_id}", "/ui/usage", "/ui/keys", "/ui/catalog"]
    for url in [*pages, "/ui/audit", "/ui/audit?verify=1"]:
        audit(page, url)


def test_the_audit_page_filters_and_verifies(page: Any, dash_gw: Gateway) -> None:
    """The operator's audit page (SPEC §21): an object changed through the API is found with the
    filters, set with the keyboard-usable form, and the chain verifies."""
    name = uniq("t")
    assert dash_gw.relay.api("POST", "/api/teams", {"name": name}).status_code == 201
    assert dash_gw.relay.api("PATCH", f"/api/teams/{name}", {"display_name": "Audited"}).status_code == 200
    sign_in(page)
    page.goto("/ui/audit")
    page.fill("input[name=kind]", "Team")
    page.select_option("select[name=action]", "update")
    page.click("button:text('Apply')")
    row = page.locator("#audit tbody tr").first
    assert name in row.inner_text() and "display_name" in row.inner_text()
    assert page.locator("#audit tbody tr", has_text="create").count() == 0
    page.click("[data-testid=verify-link]")
    assert "Chain intact" in page.locator("[data-testid=verdict]").inner_text()
    shot(page, "audit")


def test_the_page_watch_catches_errors(page: Any, page_watch: Any) -> None:
    """The check every test ends with can fail: a console error, a CSP-blocked script and a 404 are
    all caught (then cleared, so this test itself passes)."""
    page.goto("/ui/signin")
    page.evaluate("console.error('boom')")
    page.evaluate("fetch('/ui/static/missing.js').catch(() => {})")
    page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.x = 1';"
        " document.body.appendChild(s); }"
    )
    deadline = time.monotonic() + 10
    while len(page_watch.problems) < 3 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    text = "\n".join(page_watch.problems)
    assert "boom" in text and "404" in text and "Content Security Policy" in text, text
    assert page.evaluate("window.x") is None  # the inline script did not run
    page_watch.problems.clear()
