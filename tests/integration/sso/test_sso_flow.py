"""Single sign-on against a real OpenID Provider (SPEC §21), on SQLite and Postgres: the full redirect
flow, just-in-time users, group mapping at every sign-in, and each refusal."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests.fixtures.oidc import CLIENT_SECRET, SsoSetup, sign_in
from tests.fixtures.oidc import sso as sso
from tests.fixtures.relay_server import RelayProcess


def user_by_email(relay: RelayProcess, email: str) -> list[dict[str, Any]]:
    return [u for u in relay.api("GET", "/api/users").json()["items"] if u["email"] == email]


def audit(relay: RelayProcess, **filters: str) -> list[dict[str, Any]]:
    answer = relay.api("GET", "/api/audit?" + "&".join(f"{k}={v}" for k, v in filters.items()))
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def test_first_sign_in_creates_the_user_with_the_groups_memberships(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("jit-ann", email="ann@sso.test", email_verified=True, groups=["eng"])
    assert user_by_email(relay, "ann@sso.test") == []

    browser, answer = sign_in(relay, "jit-ann")

    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    assert "samesite=lax" in answer.headers.get_list("set-cookie")[0].lower()
    [user] = user_by_email(relay, "ann@sso.test")
    assert {(m["project"], m["policy"]) for m in user["memberships"]} == {
        ("sso-alpha", "sso-gold"),
        ("sso-beta", None),
    }
    page = browser.get(relay.control_url + "/ui/")
    assert page.status_code == 200 and "ann@sso.test" in page.text
    # The §3.2 session cookie works on the user session API.
    minted = browser.post(relay.control_url + "/api/auth/token", json={"project": "sso-alpha"})
    assert minted.status_code == 201, minted.text
    [entry] = audit(relay, action="sign_in", actor="ann@sso.test")
    assert entry["actor"] == {"kind": "oidc", "id": user["id"], "email": "ann@sso.test"}
    session = browser.cookies.get("relay_session")
    assert session and session not in relay.logs() and CLIENT_SECRET not in relay.logs()


def test_an_answer_naming_another_issuer_is_refused(sso: SsoSetup) -> None:
    """RFC 9207: the provider names itself in ``iss`` on the callback; another name is a mix-up."""
    relay, provider = sso.relay, sso.provider
    provider.account("mix-pia", email="pia@sso.test", email_verified=True, groups=[])

    def other_issuer(url: str) -> str:
        return str(httpx.URL(url).copy_set_param("iss", "https://evil.example"))

    _, answer = sign_in(relay, "mix-pia", before_callback=other_issuer)
    refused(answer, 400, "another identity provider")
    assert user_by_email(relay, "pia@sso.test") == []


def refused(answer: httpx.Response, status: int, reason: str) -> None:
    """A refusal page: the status, HTML naming the reason, no session set, nothing secret shown."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html")
    assert reason in answer.text
    assert "Traceback" not in answer.text and CLIENT_SECRET not in answer.text
    cookies = " ".join(answer.headers.get_list("set-cookie"))
    assert "relay_ui=" not in cookies and "relay_session=" not in cookies


def test_groups_changes_apply_at_the_next_sign_in_and_other_projects_are_kept(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("grp-bo", email="bo@sso.test", email_verified=True, groups=["eng"])
    sign_in(relay, "grp-bo")
    [user] = user_by_email(relay, "bo@sso.test")
    # An operator adds a membership the mapping does not manage: it survives every sign-in.
    kept = [{"project": m["project"], "policy": m["policy"]} for m in user["memberships"]]
    patched = relay.api(
        "PATCH", f"/api/users/{user['id']}", {"memberships": [*kept, {"project": "sso-other"}]}
    )
    assert patched.status_code == 200, patched.text

    provider.account("grp-bo", email="bo@sso.test", email_verified=True, groups=["ops"])
    _, answer = sign_in(relay, "grp-bo")

    assert answer.status_code == 303
    [again] = user_by_email(relay, "bo@sso.test")
    assert again["id"] == user["id"]
    assert {(m["project"], m["policy"]) for m in again["memberships"]} == {
        ("sso-other", None),
        ("sso-beta", None),
    }
    updates = [e for e in audit(relay, kind="User", action="update") if e["ref"] == user["id"]]
    assert updates[0]["actor"] == {"kind": "oidc", "id": user["id"], "email": "bo@sso.test"}


def test_an_existing_user_is_signed_in_never_duplicated(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    made = relay.create("users", {"name": "cy", "email": "cy@sso.test", "password": "long-password-1"})
    provider.account("ex-cy", email="cy@sso.test", email_verified=True, groups=[])
    _, answer = sign_in(relay, "ex-cy")
    assert answer.status_code == 303
    assert [u["id"] for u in user_by_email(relay, "cy@sso.test")] == [made["id"]]


def test_a_disabled_user_is_refused(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    relay.create("users", {"name": "dee", "email": "dee@sso.test", "enabled": False})
    provider.account("off-dee", email="dee@sso.test", email_verified=True, groups=["eng"])
    _, answer = sign_in(relay, "off-dee")
    refused(answer, 403, "disabled")
    [entry] = audit(relay, action="sign_in_failed", actor="dee@sso.test")
    assert entry["actor"]["kind"] == "oidc" and entry["after"] == {"reason": "user disabled"}
    assert audit(relay, action="sign_in", actor="dee@sso.test") == []


def test_an_unverified_email_is_refused_and_no_user_is_created(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("unv-eve", email="eve@sso.test", email_verified=False, groups=["eng"])
    _, answer = sign_in(relay, "unv-eve")
    refused(answer, 403, "not verified")
    assert user_by_email(relay, "eve@sso.test") == []
    assert audit(relay, action="sign_in_failed", actor="eve@sso.test")


def test_a_state_other_than_the_browsers_is_refused(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("st-fay", email="fay@sso.test", email_verified=True, groups=[])
    _, answer = sign_in(relay, "st-fay", before_callback=lambda url: url.replace("state=", "state=x"))
    refused(answer, 400, "state")
    assert user_by_email(relay, "fay@sso.test") == []


def test_a_callback_in_a_browser_that_did_not_start_the_sign_in_is_refused(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("st-gus", email="gus@sso.test", email_verified=True, groups=[])
    stolen: list[str] = []
    sign_in(
        relay, "st-gus", before_callback=lambda url: stolen.append(url) or relay.control_url + "/ui/signin"
    )
    with httpx.Client(timeout=15) as other_browser:
        refused(other_browser.get(stolen[0]), 400, "no sign-in in progress")
    assert user_by_email(relay, "gus@sso.test") == []


def test_a_replayed_nonce_is_refused(sso: SsoSetup) -> None:
    """The ID token carries the nonce of an earlier sign-in: not this one's."""
    relay, provider = sso.relay, sso.provider
    provider.account("rp-hal", email="hal@sso.test", email_verified=True, groups=[])
    earlier: list[str] = []
    sign_in(
        relay, "rp-hal", before_authorize=lambda url: earlier.append(httpx.URL(url).params["nonce"]) or url
    )
    signed_in_before = len(audit(relay, action="sign_in", actor="hal@sso.test"))

    def old_nonce(url: str) -> str:
        return str(httpx.URL(url).copy_set_param("nonce", earlier[0]))

    _, answer = sign_in(relay, "rp-hal", before_authorize=old_nonce)
    refused(answer, 400, "nonce")
    assert len(audit(relay, action="sign_in", actor="hal@sso.test")) == signed_in_before


def test_a_replayed_callback_is_refused(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("rp-ivy", email="ivy@sso.test", email_verified=True, groups=[])
    seen: list[str] = []
    browser, first = sign_in(relay, "rp-ivy", before_callback=lambda url: seen.append(url) or url)
    assert first.status_code == 303
    flow = [c for c in browser.cookies.jar if c.name == "relay_sso"]
    assert flow == []  # spent by the callback
    refused(browser.get(seen[0]), 400, "no sign-in in progress")


def test_an_expired_id_token_is_refused(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("exp-jo", email="jo@sso.test", email_verified=True, groups=[])

    def provider_clock_two_hours_behind(url: str) -> str:
        provider.skew(-7200)  # the ID token it now issues expired an hour ago
        return url

    try:
        _, answer = sign_in(relay, "exp-jo", before_callback=provider_clock_two_hours_behind)
    finally:
        provider.skew(0)
    refused(answer, 400, "expired")
    assert user_by_email(relay, "jo@sso.test") == []


def test_admin_group_members_get_the_admin_view_but_no_admin_api(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("adm-kim", email="kim@sso.test", email_verified=True, groups=["relay-admins"])
    browser, answer = sign_in(relay, "adm-kim")
    assert answer.status_code == 303
    assert browser.get(relay.control_url + "/ui/audit").status_code == 200
    session = browser.cookies.get("relay_session")
    assert session
    api = httpx.get(relay.control_url + "/api/users", headers={"Authorization": f"Bearer {session}"})
    assert api.status_code == 401

    # A change through the admin view is audited as the person who made it.
    [kim] = user_by_email(relay, "kim@sso.test")
    relay.create("service-accounts", {"name": "sso-sa", "project": "sso-alpha"})
    keys_page = browser.get(relay.control_url + "/ui/keys")
    csrf = re.search(r'name="csrf" value="([^"]+)"', keys_page.text)
    assert csrf is not None
    made = browser.post(
        relay.control_url + "/ui/keys",
        data={
            "csrf": csrf.group(1),
            "principal_kind": "serviceaccount",
            "principal": "sso-sa",
            "name": "by-kim",
        },
    )
    assert made.status_code == 201, made.text
    [entry] = [e for e in audit(relay, kind="Key", action="create") if e["after"].get("name") == "by-kim"]
    assert entry["actor"] == {"kind": "oidc", "id": kim["id"], "email": "kim@sso.test"}

    assert "kim@sso.test (admin)" in browser.get(relay.control_url + "/ui/").text
    # Signing out ends the session behind the admin view, and so the §3.2 session too.
    csrf = re.search(r'name="csrf" value="([^"]+)"', browser.get(relay.control_url + "/ui/").text)
    assert csrf is not None
    assert browser.post(relay.control_url + "/ui/signout", data={"csrf": csrf.group(1)}).status_code == 303
    gone = httpx.post(
        relay.control_url + "/api/auth/token",
        json={"project": "sso-alpha"},
        headers={"Authorization": f"Bearer {session}"},
    )
    assert gone.status_code == 401

    provider.account("plain-lee", email="lee@sso.test", email_verified=True, groups=["eng"])
    plain, _ = sign_in(relay, "plain-lee")
    assert plain.get(relay.control_url + "/ui/audit").status_code == 403


def test_the_sign_in_page_offers_sso_when_configured(sso: SsoSetup) -> None:
    page = httpx.get(sso.relay.control_url + "/ui/signin")
    assert page.status_code == 200 and 'href="/ui/sso/start"' in page.text


def test_a_sign_in_the_person_cancelled_at_the_provider_is_refused(sso: SsoSetup) -> None:
    relay, provider = sso.relay, sso.provider
    provider.account("no-quin", email="quin@sso.test", email_verified=True, groups=[])

    def cancelled(url: str) -> str:  # what the provider sends when the person declines
        state = httpx.URL(url).params["state"]
        return str(
            httpx.URL(
                relay.control_url + "/ui/sso/callback", params={"error": "access_denied", "state": state}
            )
        )

    _, answer = sign_in(relay, "no-quin", before_callback=cancelled)
    refused(answer, 400, "access_denied")
    assert audit(relay, action="sign_in_failed", actor="unknown")


def test_two_first_sign_ins_of_one_person_at_once_both_succeed_with_one_user(sso: SsoSetup) -> None:
    """The callbacks held at a barrier and released together: both transactions look for the user, find
    none and create it; the one that loses the race signs in again and finds the winner's user."""
    relay, provider = sso.relay, sso.provider
    provider.account("race-eve", email="eve@sso.test", email_verified=True, groups=["eng"])
    barrier = threading.Barrier(2, timeout=30)

    def together(url: str) -> str:
        barrier.wait()
        return url

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(sign_in, relay, "race-eve", before_callback=together) for _ in range(2)]
        results = [f.result() for f in futures]
    assert [answer.status_code for _, answer in results] == [303, 303], [a.text for _, a in results]
    assert len(user_by_email(relay, "eve@sso.test")) == 1
