"""Changes made in the dashboard's editor and self-service pages (SPEC §16) are audited exactly like
the same changes through the control API (SPEC §21), through a real ``relay serve`` on SQLite and
Postgres: the editor's create, update and delete each append their one entry with the admin as
actor; an unconfirmed delete, a refused form and a user's try at the editor append nothing; a user's
own key appends a ``Key`` create with that user as actor."""

from __future__ import annotations

import re

import httpx

from tests.fixtures.relay_server import ADMIN_TOKEN, RelayProcess
from tests.integration.audit.helpers import appended_by, summary, uniq


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def signed_in(browser: httpx.Client, **fields: str) -> str:
    """Sign ``browser`` in; the CSRF token of its session."""
    answer = browser.post("/ui/signin", data={**fields, "csrf": csrf_of(browser.get("/ui/signin").text)})
    assert answer.status_code == 303, answer.text
    return csrf_of(browser.get("/ui/").text)


def test_editor_changes_are_audited_with_the_admin_as_actor(relay: RelayProcess) -> None:
    name = uniq("dt")
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        csrf = signed_in(browser, admin_token=ADMIN_TOKEN)
        refused = browser.post("/ui/edit/teams", data={"csrf": csrf, "name": "Not A Slug"})
        assert refused.status_code == 400 and "name:" in refused.text
        assert appended_by(relay, refused) == []

        made = browser.post("/ui/edit/teams", data={"csrf": csrf, "name": name, "display_name": "One"})
        assert made.status_code == 200, made.text
        team = relay.api("GET", f"/api/teams/{name}").json()
        [entry] = appended_by(relay, made)
        assert (entry["action"], entry["kind"], entry["ref"], entry["actor"]) == (
            "create",
            "Team",
            team["id"],
            {"kind": "admin_token"},
        )

        changed = browser.post(
            f"/ui/edit/teams/{team['id']}", data={"csrf": csrf, "name": name, "display_name": "Two"}
        )
        assert (
            changed.status_code == 200
            and relay.api("GET", f"/api/teams/{name}").json()["display_name"] == "Two"
        )
        assert summary(appended_by(relay, changed)) == [("update", "Team", team["id"])]

        asked = browser.post(f"/ui/edit/teams/{team['id']}/delete", data={"csrf": csrf})
        assert asked.status_code == 200 and "Yes, delete" in asked.text
        assert appended_by(relay, asked) == [] and relay.api("GET", f"/api/teams/{name}").status_code == 200
        gone = browser.post(f"/ui/edit/teams/{team['id']}/delete", data={"csrf": csrf, "confirm": "yes"})
        assert gone.status_code == 303 and relay.api("GET", f"/api/teams/{name}").status_code == 404
        assert summary(appended_by(relay, gone)) == [("delete", "Team", team["id"])]

        forged = browser.post("/ui/edit/teams", data={"csrf": "wrong", "name": uniq("dt")})
        assert forged.status_code == 403 and appended_by(relay, forged) == []


def test_a_users_own_key_is_audited_with_them_as_actor(relay: RelayProcess) -> None:
    s = uniq("self")
    password = f"pw-{s}-long"
    relay.create("teams", {"name": f"t-{s}"})
    relay.create("projects", {"name": f"prj-{s}", "team": f"t-{s}"})
    user = relay.create(
        "users",
        {
            "name": f"u-{s}",
            "email": f"{s}@example.com",
            "password": password,
            "memberships": [{"project": f"prj-{s}"}],
        },
    )
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        csrf = signed_in(browser, email=f"{s}@example.com", password=password)
        made = browser.post("/ui/me/keys", data={"csrf": csrf, "project": f"prj-{s}", "name": f"k-{s}"})
        assert made.status_code == 201, made.text
        key = relay.api("GET", f"/api/keys/k-{s}").json()
        assert key["principal_id"] == user["id"] and key["project"] == f"prj-{s}"
        [entry] = appended_by(relay, made)
        assert (entry["action"], entry["kind"], entry["ref"]) == ("create", "Key", key["id"])
        assert entry["actor"] == {"kind": "user", "id": user["id"], "email": f"{s}@example.com"}

        elsewhere = browser.post("/ui/me/keys", data={"csrf": csrf, "project": "live-project"})
        assert elsewhere.status_code == 403 and appended_by(relay, elsewhere) == []
        editor = browser.post("/ui/edit/teams", data={"csrf": csrf, "name": uniq("dt")})
        assert editor.status_code == 403 and appended_by(relay, editor) == []


def test_the_editor_revokes_every_token_of_a_user_after_asking(relay: RelayProcess) -> None:
    s = uniq("tok")
    relay.create("teams", {"name": f"t-{s}"})
    relay.create("projects", {"name": f"prj-{s}", "team": f"t-{s}"})
    user = relay.create(
        "users",
        {
            "name": f"u-{s}",
            "email": f"{s}@example.com",
            "password": f"pw-{s}-long",
            "memberships": [{"project": f"prj-{s}"}],
        },
    )
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        csrf = signed_in(browser, admin_token=ADMIN_TOKEN)
        path = f"/ui/edit/users/{user['id']}/revoke-tokens"
        asked = browser.post(path, data={"csrf": csrf})
        assert asked.status_code == 200 and "Yes, revoke all tokens" in asked.text
        assert appended_by(relay, asked) == []
        assert relay.api("GET", f"/api/users/{user['id']}").json()["token_version"] == user["token_version"]
        done = browser.post(path, data={"csrf": csrf, "confirm": "yes"})
        assert done.status_code == 200 and "had every inference token revoked" in done.text
        assert summary(appended_by(relay, done)) == [("revoke", "Token", f"user:{user['id']}")]
        assert (
            relay.api("GET", f"/api/users/{user['id']}").json()["token_version"] == user["token_version"] + 1
        )
        assert browser.post(f"/ui/edit/teams/t-{s}/revoke-tokens", data={"csrf": csrf}).status_code == 404


def test_guardrails_are_edited_and_named_by_policies_in_the_editor(relay: RelayProcess) -> None:
    """SPEC §16 × §20: the Guardrail kind and a policy's ``guardrails`` list have forms that validate
    as the API does (a pattern that does not compile is refused naming ``regex``), and deleting a
    guardrail a policy names is refused with the API's 409."""
    name, pol = uniq("gr"), uniq("grpol")
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        csrf = signed_in(browser, admin_token=ADMIN_TOKEN)
        fields = {"csrf": csrf, "name": name, "stage": "input", "action": "redact", "message": ""}
        bad = browser.post("/ui/edit/guardrails", data={**fields, "regex": '["("]'})
        assert bad.status_code in (400, 422) and "regex" in bad.text, bad.text
        assert relay.api("GET", f"/api/guardrails/{name}").status_code == 404

        made = browser.post("/ui/edit/guardrails", data={**fields, "pii": '["email"]'})
        assert made.status_code == 200, made.text
        guardrail = relay.api("GET", f"/api/guardrails/{name}").json()
        assert (guardrail["pii"], guardrail["regex"], guardrail["action"]) == (["email"], None, "redact")

        policy = browser.post(
            "/ui/edit/policies",
            data={
                "csrf": csrf,
                "name": pol,
                "models": "*",
                "key_selection": "prioritized",  # a select always posts its value
                "guardrails": name,
                "enabled": "on",
            },
        )
        assert policy.status_code == 200, policy.text
        named = relay.api("GET", f"/api/policies/{pol}").json()["guardrails"]
        assert named == [name], named

        refused = browser.post(
            f"/ui/edit/guardrails/{guardrail['id']}/delete", data={"csrf": csrf, "confirm": "yes"}
        )
        assert refused.status_code == 409 and relay.api("GET", f"/api/guardrails/{name}").status_code == 200
