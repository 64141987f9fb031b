"""Editing the catalog and self-service (SPEC §16) in a real headless Firefox ESR, with real clicks
(``tests.fixtures.bidi``): a model created, edited and deleted through the forms with the API read
back after each step, a validation error shown, the delete refused once and then confirmed, a user's
own key made at ``/ui/me`` working on the inference plane; each page with no console error, no failed
request and no serious axe-core violation.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.dashboard.conftest import ARTIFACTS
from tests.e2e.dashboard.helpers import AXE, AXE_RUN, new_member
from tests.e2e.dashboard.test_firefox import open_page, sign_in_by_keyboard
from tests.fixtures.bidi import Firefox
from tests.fixtures.live import Gateway, uniq


def fill(ff: Firefox, values: dict[str, str]) -> None:
    """Set the first form field of each name (as typing would leave it)."""
    for name, value in values.items():
        ff.evaluate(f"document.querySelector('[name={json.dumps(name)}]').value = {json.dumps(value)}")


def clean(ff: Firefox, path: str) -> None:
    """No serious axe-core violation and no page problem on ``path`` (already open); a screenshot."""
    ff.run_script(AXE.read_text())
    bad = ff.evaluate(AXE_RUN)
    assert not bad, f"{path} in Firefox:\n" + "\n".join(bad)
    ff.screenshot(ARTIFACTS / f"firefox-edit-{path.strip('/').replace('/', '-')}.png")


def text(ff: Firefox, selector: str) -> str:
    return str(ff.evaluate(f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''"))


def test_firefox_creates_edits_and_deletes_a_model(
    ff: Firefox, dash_gw: Gateway, request: pytest.FixtureRequest
) -> None:
    request.node.expected_problems = ["HTTP 400"]
    name = uniq("ffm")
    sign_in_by_keyboard(ff)
    assert open_page(ff, "/ui/edit/models") == "Models"
    clean(ff, "/ui/edit/models")
    fill(ff, {"name": name, "provider": "Not A Slug"})
    ff.click("form.edit button")
    ff.wait_for("!!document.querySelector('[role=alert]')", "the API's validation message")
    assert text(ff, "[role=alert]").startswith("provider")
    fill(ff, {"provider": "openai", "aliases": f"{name}-x"})
    ff.click("form.edit button")
    ff.wait_for("!!document.querySelector('[data-testid=notice]')", "the created notice")
    found = dash_gw.relay.api("GET", f"/api/models/{name}").json()
    assert found["provider"] == "openai" and found["aliases"] == [f"{name}-x"]
    clean(ff, f"/ui/edit/models/{found['id']}")

    fill(ff, {"aliases": f"{name}-y"})
    ff.click("form.edit button")
    ff.wait_for("(document.querySelector('[data-testid=notice]') || {}).textContent?.includes('saved')")
    assert dash_gw.relay.api("GET", f"/api/models/{name}").json()["aliases"] == [f"{name}-y"]

    ff.click("a.danger")
    ff.wait_for("!!document.querySelector('form.confirm')", "the confirm page")
    clean(ff, f"/ui/edit/models/{found['id']}/delete")
    ff.click("form.confirm a")  # "No, keep it"
    ff.wait_for("!!document.querySelector('form.edit')", "back on the edit page")
    assert dash_gw.relay.api("GET", f"/api/models/{name}").status_code == 200
    ff.click("a.danger")
    ff.wait_for("!!document.querySelector('form.confirm')", "the confirm page")
    ff.click("form.confirm button")
    ff.wait_for("(document.querySelector('[data-testid=notice]') || {}).textContent === 'Deleted.'")
    assert dash_gw.relay.api("GET", f"/api/models/{name}").status_code == 404


def test_firefox_user_makes_their_own_key(ff: Firefox, dash_gw: Gateway) -> None:
    email, password = new_member(dash_gw)
    open_page(ff, "/ui/signin")
    fill(ff, {"email": email, "password": password})
    ff.evaluate("document.querySelector('#password').form.requestSubmit()")
    ff.wait_for("!!document.querySelector('h1') && document.querySelector('h1').textContent === 'Overview'")
    assert open_page(ff, "/ui/me") == "My keys and tokens"
    clean(ff, "/ui/me")
    fill(ff, {"name": uniq("ffk")})
    ff.click("form[action='/ui/me/keys'] button")
    ff.wait_for("!!document.querySelector('[data-testid=plaintext]')", "the plaintext")
    plaintext = text(ff, "[data-testid=plaintext]")
    assert plaintext.startswith("sk-relay-")
    assert dash_gw.chat(key=plaintext).status_code == 200
