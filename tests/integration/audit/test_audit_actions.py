"""Every control-plane change appends exactly its audit entries (SPEC §21), through a real ``relay
serve`` on SQLite and Postgres: catalog create/update/delete of every kind, keys, tokens, sign-ins,
``relay apply``; a refused or dry-run change appends nothing; write-only fields are ``"<redacted>"``
and no secret reaches the table's raw bytes; each answer's ``X-Relay-Request-ID`` is its entries'
``request_id``."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.fixtures.relay_server import ADMIN_TOKEN, RelayProcess
from tests.integration.audit.helpers import all_entries, appended_by, sql, summary, uniq

REDACTED = "<redacted>"
SECRETS: list[str] = []  # every secret a test here sent or received: none may reach the table


def created(relay: RelayProcess, plural: str, body: dict[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    response = relay.api("POST", f"/api/{plural}", body)
    assert response.status_code == 201, response.text
    return response.json(), appended_by(relay, response)


def catalog(relay: RelayProcess) -> list[tuple[str, str, dict[str, Any]]]:
    """One object of every catalog kind, in dependency order: ``(plural, kind, body)``."""
    s = uniq("a")
    host_key_value, password = f"sk-upstream-{s}", f"pw-{s}-secret"
    webhook_secret = "whsec_" + "QUJD" * 11
    SECRETS.extend([host_key_value, password, webhook_secret])
    return [
        ("teams", "Team", {"name": f"t-{s}"}),
        ("hosts", "Host", {"name": f"h-{s}", "base_url": "http://127.0.0.1:9"}),
        ("host-keys", "HostKey", {"name": f"k-{s}", "host": f"h-{s}", "value": host_key_value}),
        ("models", "Model", {"name": f"m-{s}", "provider": "openai"}),
        ("bindings", "Binding", {"name": f"b-{s}", "model": f"m-{s}", "host": f"h-{s}", "adapter": "openai"}),
        ("policies", "Policy", {"name": f"p-{s}", "models": [f"m-{s}"], "host_keys": [f"k-{s}"]}),
        ("projects", "Project", {"name": f"prj-{s}", "team": f"t-{s}", "default_policy": f"p-{s}"}),
        ("service-accounts", "ServiceAccount", {"name": f"sa-{s}", "project": f"prj-{s}"}),
        (
            "users",
            "User",
            {"name": f"u-{s}", "email": f"u-{s}@example.com", "password": password, "memberships": []},
        ),
        (
            "webhooks",
            "Webhook",
            {"name": f"w-{s}", "url": "http://127.0.0.1:9/hook", "secret": webhook_secret},
        ),
    ]


def test_create_update_delete_of_every_kind_append_one_entry_each(relay: RelayProcess) -> None:
    made = []
    for plural, kind, body in catalog(relay):
        obj, entries = created(relay, plural, body)
        assert summary(entries) == [("create", kind, obj["id"])]
        entry = entries[0]
        assert "before" not in entry and entry["after"]["name"] == body["name"]
        assert entry["actor"] == {"kind": "admin_token"} and entry["ip"] == "127.0.0.1"
        made.append((plural, kind, obj))
    by_kind = {kind: obj for _, kind, obj in made}
    created_entries = {e["kind"]: e for e in all_entries(relay, action="create")}
    assert created_entries["User"]["after"]["password"] == REDACTED
    assert created_entries["HostKey"]["after"]["value"] == REDACTED
    assert created_entries["Webhook"]["after"]["secret"] == REDACTED
    assert by_kind["User"]["id"] in {e["ref"] for e in all_entries(relay, kind="User")}

    for plural, kind, obj in made:
        change = {"display_name": "Renamed"} if kind == "Team" else {"enabled": False}
        response = relay.api("PATCH", f"/api/{plural}/{obj['id']}", change)
        assert response.status_code == 200, response.text
        entries = appended_by(relay, response)
        assert summary(entries) == [("update", kind, obj["id"])]
        field, value = next(iter(change.items()))
        assert entries[0]["before"][field] != value and entries[0]["after"][field] == value

    for plural, kind, obj in reversed(made):
        response = relay.api("DELETE", f"/api/{plural}/{obj['id']}")
        assert response.status_code == 204, response.text
        entries = appended_by(relay, response)
        assert summary(entries) == [("delete", kind, obj["id"])]
        assert "after" not in entries[0] and entries[0]["before"]["id"] == obj["id"]


def test_a_refused_write_appends_nothing(relay: RelayProcess) -> None:
    team, _ = created(relay, "teams", {"name": uniq("t")})
    host, _ = created(relay, "hosts", {"name": uniq("h"), "base_url": "http://127.0.0.1:9"})
    policy, _ = created(relay, "policies", {"name": uniq("p"), "models": []})
    created(relay, "projects", {"name": uniq("prj"), "team": team["name"], "default_policy": policy["name"]})
    count = len(all_entries(relay))
    refusals = [
        ("DELETE", f"/api/teams/{team['id']}", None, 409),  # still referenced
        ("POST", "/api/teams", {"name": team["name"]}, 409),  # name taken
        ("POST", "/api/host-keys", {"name": uniq("k"), "host": "no-such-host", "value": "v"}, 422),
        ("PATCH", f"/api/hosts/{host['id']}", {"base_url": 7}, 400),
        ("POST", "/api/keys", {"principal_kind": "serviceaccount", "principal": "nobody"}, 422),
        ("DELETE", "/api/tokens/no-such-jti", None, 404),
    ]
    for method, path, body, status in refusals:
        response = relay.api(method, path, body)
        assert response.status_code == status, (path, response.text)
        assert appended_by(relay, response) == []
    assert len(all_entries(relay)) == count


def test_keys_create_update_rotate_revoke_delete(relay: RelayProcess) -> None:
    s = uniq("k")
    created(relay, "teams", {"name": f"t-{s}"})
    policy, _ = created(relay, "policies", {"name": f"p-{s}", "models": []})
    created(relay, "projects", {"name": f"prj-{s}", "team": f"t-{s}", "default_policy": policy["name"]})
    created(relay, "service-accounts", {"name": f"sa-{s}", "project": f"prj-{s}"})
    response = relay.api("POST", "/api/keys", {"principal_kind": "serviceaccount", "principal": f"sa-{s}"})
    key, plaintext = response.json()["key"], response.json()["plaintext"]
    SECRETS.append(plaintext)
    assert summary(appended_by(relay, response)) == [("create", "Key", key["id"])]
    steps = [
        ("PATCH", f"/api/keys/{key['id']}", {"enabled": False}, "update"),
        ("POST", f"/api/keys/{key['id']}/rotate", {"grace_seconds": 60}, "rotate"),
        ("POST", f"/api/keys/{key['id']}/revoke", None, "revoke"),
        ("POST", f"/api/keys/{key['id']}/revoke", None, None),  # already revoked: no change
        ("DELETE", f"/api/keys/{key['id']}", None, "delete"),
    ]
    for method, path, body, action in steps:
        response = relay.api(method, path, body)
        assert response.status_code < 300, response.text
        if method == "POST" and path.endswith("rotate"):
            SECRETS.append(response.json()["plaintext"])
        entries = appended_by(relay, response)
        assert summary(entries) == ([(action, "Key", key["id"])] if action else [])
    rotated = all_entries(relay, action="rotate", kind="Key")[0]
    assert rotated["before"]["prefix"] != rotated["after"]["prefix"]


def test_token_revocations_and_sign_ins(relay: RelayProcess) -> None:
    s = uniq("tok")
    password = f"pw-{s}"
    SECRETS.append(password)
    created(relay, "teams", {"name": f"t-{s}"})
    created(relay, "projects", {"name": f"prj-{s}", "team": f"t-{s}"})
    user, _ = created(
        relay,
        "users",
        {
            "name": f"u-{s}",
            "email": f"{s}@example.com",
            "password": password,
            "memberships": [{"project": f"prj-{s}"}],
        },
    )
    minted = relay.api("POST", f"/api/users/{user['id']}/tokens", {"project": f"prj-{s}"})
    assert minted.status_code == 201 and appended_by(relay, minted) == []  # minting changes nothing
    SECRETS.append(minted.json()["token"])
    jti = minted.json()["jti"]
    revoked = relay.api("DELETE", f"/api/tokens/{jti}")
    assert summary(appended_by(relay, revoked)) == [("revoke", "Token", jti)]
    every = relay.api("POST", f"/api/users/{user['id']}/revoke-tokens")
    entries = appended_by(relay, every)
    assert summary(entries) == [("revoke", "Token", f"user:{user['id']}")]
    assert entries[0]["after"]["token_version"] == entries[0]["before"]["token_version"] + 1

    login = relay.control.post("/api/auth/login", json={"email": f"{s}@example.com", "password": password})
    assert login.status_code == 200, login.text
    SECRETS.append(login.json()["session"])
    [entry] = appended_by(relay, login)
    assert (entry["action"], entry["kind"], entry["ref"]) == ("sign_in", "Session", user["id"])
    assert entry["actor"] == {"kind": "user", "id": user["id"], "email": f"{s}@example.com"}
    wrong = relay.control.post(
        "/api/auth/login", json={"email": f"{s}@example.com", "password": "guess-" + s}
    )
    assert wrong.status_code == 401
    [failed] = appended_by(relay, wrong)
    assert (failed["action"], failed["ref"], failed["actor"]) == (
        "sign_in_failed",
        f"{s}@example.com",
        {"kind": "user", "email": f"{s}@example.com"},
    )
    assert "guess-" not in str(failed)


def test_a_setting_change_appends_its_entry(relay: RelayProcess) -> None:
    current = relay.api("GET", "/api/settings/payload_logging").json()
    wanted = {"enabled": not current["enabled"], "max_bytes": 4096}
    response = relay.api("PUT", "/api/settings/payload_logging", wanted)
    assert response.status_code == 200, response.text
    [entry] = appended_by(relay, response)
    assert (entry["action"], entry["kind"], entry["ref"]) == ("update", "Setting", "payload_logging")
    assert (entry["before"], entry["after"]) == (current, wanted)
    refused = relay.api("PUT", "/api/settings/payload_logging", {"enabled": "maybe"})
    assert refused.status_code == 400 and appended_by(relay, refused) == []


def test_a_cache_purge_appends_its_entry(relay: RelayProcess) -> None:
    policy, _ = created(relay, "policies", {"name": uniq("p"), "models": [], "cache": {"ttl": "1h"}})
    response = relay.api("DELETE", f"/api/policies/{policy['name']}/cache")
    assert response.status_code == 200, response.text
    [entry] = appended_by(relay, response)
    assert (entry["action"], entry["kind"], entry["ref"]) == ("purge", "Policy", policy["id"])
    assert entry["after"] == {"policy": policy["name"], "purged": 0}
    missing = relay.api("DELETE", "/api/policies/no-such-policy/cache")
    assert missing.status_code == 404 and appended_by(relay, missing) == []


def test_apply_appends_one_entry_per_changed_object_and_one_for_the_apply(relay: RelayProcess) -> None:
    s = uniq("ap")
    docs = [
        {"kind": "Team", "name": f"t-{s}", "spec": {"display_name": "One"}},
        {"kind": "Host", "name": f"h-{s}", "spec": {"base_url": "http://127.0.0.1:9"}},
    ]
    count = len(all_entries(relay))
    dry = relay.api("POST", "/api/apply", {"documents": docs, "dry_run": True})
    assert dry.status_code == 200 and appended_by(relay, dry) == []
    broken = [*docs, {"kind": "HostKey", "name": f"k-{s}", "spec": {"host": "nowhere", "value": "x"}}]
    refused = relay.api("POST", "/api/apply", {"documents": broken})
    assert refused.status_code == 422 and appended_by(relay, refused) == []
    assert len(all_entries(relay)) == count

    applied = relay.api("POST", "/api/apply", {"documents": docs})
    assert applied.status_code == 200, applied.text
    entries = appended_by(relay, applied)
    request_id = applied.headers["x-relay-request-id"]
    assert [(e["action"], e["kind"]) for e in entries] == [
        ("create", "Team"),
        ("create", "Host"),
        ("apply", "Catalog"),
    ]
    assert entries[-1]["ref"] == request_id
    assert entries[-1]["after"]["plan"] == [
        {"kind": "Team", "name": f"t-{s}", "action": "create"},
        {"kind": "Host", "name": f"h-{s}", "action": "create"},
    ]
    again = relay.api("POST", "/api/apply", {"documents": docs})
    assert appended_by(relay, again) == []  # unchanged: nothing changed, nothing recorded
    docs[0]["spec"]["display_name"] = "Two"
    changed = relay.api("POST", "/api/apply", {"documents": docs})
    assert [(e["action"], e["kind"]) for e in appended_by(relay, changed)] == [
        ("update", "Team"),
        ("apply", "Catalog"),
    ]


def signed_in(relay: RelayProcess, browser: httpx.Client, **fields: str) -> httpx.Response:
    form = browser.get("/ui/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    return browser.post("/ui/signin", data={**fields, "csrf": csrf.group(1)})


def test_dashboard_sign_ins_and_the_audit_page(relay: RelayProcess) -> None:
    s = uniq("dash")
    password = f"pw-{s}"
    SECRETS.append(password)
    created(relay, "teams", {"name": f"t-{s}"})
    created(relay, "projects", {"name": f"prj-{s}", "team": f"t-{s}"})
    user, _ = created(
        relay,
        "users",
        {
            "name": f"u-{s}",
            "email": f"{s}@example.com",
            "password": password,
            "memberships": [{"project": f"prj-{s}"}],
        },
    )
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        refused = signed_in(relay, browser, admin_token="not-the-token")
        assert refused.status_code == 401
        [failed] = appended_by(relay, refused)
        assert (failed["action"], failed["ref"], failed["actor"]) == (
            "sign_in_failed",
            "admin_token",
            {"kind": "admin_token"},
        )
        admin = signed_in(relay, browser, admin_token=ADMIN_TOKEN)
        assert admin.status_code == 303
        assert summary(appended_by(relay, admin)) == [("sign_in", "Session", "admin_token")]

        page = browser.get("/ui/audit", params={"kind": "User", "action": "create"})
        assert page.status_code == 200, page.text
        assert f'data-entry="{all_entries(relay, kind="User", action="create")[0]["id"]}"' in page.text
        assert 'href="/ui/audit"' in browser.get("/ui/").text  # in the operator's navigation
        verified = browser.get("/ui/audit", params={"verify": "1"})
        assert re.search(r'data-testid="verdict"[^>]*>Chain intact: [\d,]+ entries verified', verified.text)
        assert browser.get("/ui/audit", params={"action": "wipe"}).status_code == 400
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        member = signed_in(relay, browser, email=f"{s}@example.com", password=password)
        assert member.status_code == 303
        [entry] = appended_by(relay, member)
        assert entry["action"] == "sign_in" and entry["actor"] == {
            "kind": "user",
            "id": user["id"],
            "email": f"{s}@example.com",
        }
        assert browser.get("/ui/audit").status_code == 403  # operators only


def test_every_answer_carries_its_request_id_and_no_secret_reaches_the_table(relay: RelayProcess) -> None:
    listing = relay.control.get("/api/teams")
    assert len(listing.headers["x-relay-request-id"]) == 32
    anonymous = relay.control.get("/api/teams", headers={"authorization": ""})
    assert anonymous.status_code == 401 and anonymous.headers["x-relay-request-id"]

    assert len(SECRETS) >= 8, "runs after the tests that made the secrets"
    rows = sql(relay, "SELECT * FROM audit_entries")
    assert rows
    raw = "\n".join("|".join("" if v is None else str(v) for v in row) for row in rows)
    for secret in SECRETS:
        assert secret not in raw
    assert REDACTED in raw
