"""Credentials (SPEC §3), row by row, over HTTP: the control plane issues and changes them, and the
inference plane's ``GET /v1/models`` is the authenticated probe — on SQLite and on Postgres."""

from __future__ import annotations

import base64
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.fixtures.relay_server import RelayProcess


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class World:
    """A team, a project with a default policy, a service account and a user with a password; each
    policy grants one distinct model, so ``/v1/models`` reveals which policy governs a request."""

    def __init__(self, relay: RelayProcess) -> None:
        self.relay = relay
        host = relay.create("hosts", {"name": uniq("h"), "base_url": "http://127.0.0.1:9"})
        relay.create("host-keys", {"name": uniq("hk"), "host": host["name"], "value": "upstream-secret"})
        self.models = {}
        self.policies = {}
        for role in ("default", "account", "key", "member"):
            model = relay.create("models", {"name": uniq(f"m-{role}"), "provider": "openai"})
            relay.create(
                "bindings",
                {"name": uniq("b"), "model": model["name"], "host": host["name"], "adapter": "openai"},
            )
            self.models[role] = model["name"]
            self.policies[role] = relay.create(
                "policies", {"name": uniq(f"p-{role}"), "models": [model["name"]]}
            )
        team = relay.create("teams", {"name": uniq("t")})
        self.project = relay.create(
            "projects",
            {"name": uniq("prj"), "team": team["name"], "default_policy": self.policies["default"]["name"]},
        )
        self.account = relay.create("service-accounts", {"name": uniq("sa"), "project": self.project["name"]})
        self.password = "s3cret-" + uuid.uuid4().hex
        self.user = relay.create(
            "users",
            {
                "name": uniq("u"),
                "email": f"{uniq('u')}@example.com",
                "password": self.password,
                "memberships": [{"project": self.project["name"]}],
            },
        )

    def key(self, **fields: Any) -> tuple[dict[str, Any], str]:
        body = {"principal_kind": "serviceaccount", "principal": self.account["name"], **fields}
        response = self.relay.api("POST", "/api/keys", body)
        assert response.status_code == 201, response.text
        return response.json()["key"], response.json()["plaintext"]

    def token(self, ttl: int | None = None, user: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"project": self.project["name"]}
        if ttl is not None:
            body["ttl_seconds"] = ttl
        response = self.relay.api("POST", f"/api/users/{user or self.user['id']}/tokens", body)
        assert response.status_code == 201, response.text
        return dict(response.json())


def probe(relay: RelayProcess, credential: str | None, header: str = "authorization") -> httpx.Response:
    headers = {}
    if credential is not None:
        headers[header] = f"Bearer {credential}" if header == "authorization" else credential
    return relay.inference.get("/v1/models", headers=headers)


def assert_denied(response: httpx.Response, status: int, code: str, message: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (code, message), error
    assert response.headers.get("x-relay-request-id")


def granted(response: httpx.Response) -> set[str]:
    assert response.status_code == 200, response.text
    return {m["id"] for m in response.json()["data"]}


@pytest.fixture
def world(relay: RelayProcess) -> World:
    return World(relay)


# --- §3.3 where the credential is read -------------------------------------------------------------


def test_missing_credential(world: World) -> None:
    assert_denied(probe(world.relay, None), 401, "unauthenticated", "missing credential")


def test_bearer_and_x_api_key_both_work(world: World) -> None:
    _, plaintext = world.key()
    assert world.models["default"] in granted(probe(world.relay, plaintext))
    assert world.models["default"] in granted(probe(world.relay, plaintext, header="x-api-key"))


# --- §3.1 relay keys ------------------------------------------------------------------------------


def test_key_shape_and_storage_fields(world: World) -> None:
    key, plaintext = world.key()
    assert plaintext.startswith("sk-relay-") and len(plaintext) == len("sk-relay-") + 43
    assert key["prefix"] == plaintext[:16] and key["name"] == plaintext[:16]
    assert key["project_id"] == world.project["id"] and key["principal_id"] == world.account["id"]
    for response in (world.relay.api("GET", f"/api/keys/{key['id']}"), world.relay.api("GET", "/api/keys")):
        assert plaintext not in response.text and "key_hash" not in response.text


def test_unknown_key(world: World) -> None:
    assert_denied(probe(world.relay, "sk-relay-" + "x" * 43), 401, "unauthenticated", "invalid api key")


def test_disabled_key_and_reenable(world: World) -> None:
    key, plaintext = world.key()
    world.relay.api("PATCH", f"/api/keys/{key['id']}", {"enabled": False})
    assert_denied(probe(world.relay, plaintext), 401, "unauthenticated", "api key disabled")
    world.relay.api("PATCH", f"/api/keys/{key['id']}", {"enabled": True})
    assert probe(world.relay, plaintext).status_code == 200


def test_revoked_key_and_revoke_is_idempotent(world: World) -> None:
    key, plaintext = world.key()
    first = world.relay.api("POST", f"/api/keys/{key['id']}/revoke").json()
    again = world.relay.api("POST", f"/api/keys/{key['id']}/revoke").json()
    assert first["revoked_at"] and first["revoked_at"] == again["revoked_at"]
    assert_denied(probe(world.relay, plaintext), 401, "unauthenticated", "api key revoked")


def test_expired_key(world: World) -> None:
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    _, plaintext = world.key(expires_at=past)
    assert_denied(probe(world.relay, plaintext), 401, "unauthenticated", "api key expired")
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    _, later = world.key(expires_at=future)
    assert probe(world.relay, later).status_code == 200


def test_rotation_with_grace_then_rotated(world: World) -> None:
    key, old = world.key()
    rotated = world.relay.api("POST", f"/api/keys/{key['id']}/rotate", {"grace_seconds": 2})
    assert rotated.status_code == 200
    new = rotated.json()["plaintext"]
    assert new != old and rotated.json()["key"]["prefix"] == new[:16]
    assert probe(world.relay, new).status_code == 200
    assert probe(world.relay, old).status_code == 200  # inside the grace window
    time.sleep(2.2)
    assert_denied(probe(world.relay, old), 401, "unauthenticated", "api key rotated")
    assert probe(world.relay, new).status_code == 200


def test_rotation_without_grace_invalidates_at_once(world: World) -> None:
    key, old = world.key()
    new = world.relay.api("POST", f"/api/keys/{key['id']}/rotate", {"grace_seconds": 0}).json()["plaintext"]
    assert_denied(probe(world.relay, old), 401, "unauthenticated", "api key rotated")
    assert probe(world.relay, new).status_code == 200


@pytest.mark.parametrize("grace", [-1, 86401, "soon"])
def test_rotation_grace_bounds(world: World, grace: Any) -> None:
    key, plaintext = world.key()
    response = world.relay.api("POST", f"/api/keys/{key['id']}/rotate", {"grace_seconds": grace})
    assert response.status_code == 400 and "grace_seconds" in response.json()["error"]["message"]
    assert probe(world.relay, plaintext).status_code == 200  # nothing changed


def test_disabled_principal_or_project_disables_the_key(world: World) -> None:
    _, plaintext = world.key()
    relay = world.relay
    relay.api("PATCH", f"/api/service-accounts/{world.account['id']}", {"enabled": False})
    assert_denied(probe(relay, plaintext), 401, "unauthenticated", "api key disabled")
    relay.api("PATCH", f"/api/service-accounts/{world.account['id']}", {"enabled": True})
    relay.api("PATCH", f"/api/projects/{world.project['id']}", {"enabled": False})
    assert_denied(probe(relay, plaintext), 401, "unauthenticated", "api key disabled")
    relay.api("PATCH", f"/api/projects/{world.project['id']}", {"enabled": True})
    user_key = relay.api(
        "POST", "/api/keys", {"principal_kind": "user", "principal": world.user["name"]}
    ).json()
    assert probe(relay, user_key["plaintext"]).status_code == 200
    relay.api("PATCH", f"/api/users/{world.user['id']}", {"enabled": False})
    assert_denied(probe(relay, user_key["plaintext"]), 401, "unauthenticated", "api key disabled")


def test_admission_order(world: World) -> None:
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    key, plaintext = world.key(expires_at=past, enabled=False)
    world.relay.api("POST", f"/api/keys/{key['id']}/revoke")
    assert_denied(probe(world.relay, plaintext), 401, "unauthenticated", "api key disabled")
    world.relay.api("PATCH", f"/api/keys/{key['id']}", {"enabled": True})
    assert_denied(probe(world.relay, plaintext), 401, "unauthenticated", "api key revoked")
    _, plaintext2 = world.key(expires_at=past)
    world.relay.api("PATCH", f"/api/service-accounts/{world.account['id']}", {"enabled": False})
    assert_denied(probe(world.relay, plaintext2), 401, "unauthenticated", "api key expired")


def test_user_keys_need_membership(world: World) -> None:
    other = world.relay.create("projects", {"name": uniq("prj"), "team": world.project["team"]})
    response = world.relay.api(
        "POST",
        "/api/keys",
        {"principal_kind": "user", "principal": world.user["id"], "project": other["name"]},
    )
    assert response.status_code == 422 and "not a member" in response.json()["error"]["message"]
    bad = world.relay.api("POST", "/api/keys", {"principal_kind": "robot", "principal": "x"})
    assert bad.status_code == 400 and "principal_kind" in bad.json()["error"]["message"]
    missing = world.relay.api("POST", "/api/keys", {"principal_kind": "serviceaccount", "principal": "nope"})
    assert missing.status_code == 422


# --- §3.4 policy resolution -----------------------------------------------------------------------


def test_policy_resolution_order(world: World) -> None:
    relay = world.relay
    _, plain = world.key()
    assert granted(probe(relay, plain)) == {world.models["default"]}
    relay.api(
        "PATCH", f"/api/service-accounts/{world.account['id']}", {"policy": world.policies["account"]["name"]}
    )
    assert granted(probe(relay, plain)) == {world.models["account"]}
    _, keyed = world.key(policy=world.policies["key"]["name"])
    assert granted(probe(relay, keyed)) == {world.models["key"]}
    # a user: membership policy, else the project's default
    token = world.token()["token"]
    assert granted(probe(relay, token)) == {world.models["default"]}
    relay.api(
        "PATCH",
        f"/api/users/{world.user['id']}",
        {"memberships": [{"project": world.project["name"], "policy": world.policies["member"]["name"]}]},
    )
    assert granted(probe(relay, token)) == {world.models["member"]}


def test_no_policy_and_disabled_policy(world: World) -> None:
    relay = world.relay
    bare = relay.create("projects", {"name": uniq("bare"), "team": world.project["team"]})
    account = relay.create("service-accounts", {"name": uniq("sa"), "project": bare["name"]})
    plain = relay.api(
        "POST", "/api/keys", {"principal_kind": "serviceaccount", "principal": account["id"]}
    ).json()
    assert_denied(probe(relay, plain["plaintext"]), 403, "no_policy", "no policy governs this credential")
    _, keyed = world.key(policy=world.policies["key"]["name"])
    relay.api("PATCH", f"/api/policies/{world.policies['key']['id']}", {"enabled": False})
    response = probe(relay, keyed)
    assert response.status_code == 403 and response.json()["error"]["code"] == "policy_disabled"


# --- §3.2 inference tokens ------------------------------------------------------------------------


def test_token_claims_exactly(world: World) -> None:
    minted = world.token()
    header = jwt.get_unverified_header(minted["token"])
    claims = jwt.decode(minted["token"], options={"verify_signature": False})
    assert header["alg"] == "EdDSA"
    assert set(claims) == {"iss", "sub", "prj", "ver", "jti", "iat", "exp"}
    assert claims["iss"] == "relay" and claims["sub"] == f"user:{world.user['id']}"
    assert claims["prj"] == world.project["id"] and claims["ver"] == world.user["token_version"]
    assert claims["jti"] == minted["jti"] and claims["exp"] - claims["iat"] == 3600
    assert world.token(ttl=86400)["token"]
    assert world.models["default"] in granted(probe(world.relay, minted["token"]))


@pytest.mark.parametrize("ttl", [0, 86401, -5])
def test_token_ttl_bounds(world: World, ttl: int) -> None:
    response = world.relay.api(
        "POST", f"/api/users/{world.user['id']}/tokens", {"project": world.project["id"], "ttl_seconds": ttl}
    )
    assert response.status_code == 400 and "ttl_seconds" in response.json()["error"]["message"]


def test_token_needs_membership(world: World) -> None:
    other = world.relay.create("projects", {"name": uniq("prj"), "team": world.project["team"]})
    response = world.relay.api("POST", f"/api/users/{world.user['id']}/tokens", {"project": other["name"]})
    assert response.status_code == 403


def test_login_session_mints_tokens(world: World) -> None:
    control = httpx.Client(base_url=world.relay.control_url)
    bad = control.post("/api/auth/login", json={"email": world.user["email"], "password": "wrong-password"})
    assert bad.status_code == 401
    login = control.post("/api/auth/login", json={"email": world.user["email"], "password": world.password})
    assert login.status_code == 200 and login.cookies.get("relay_session") == login.json()["session"]
    by_cookie = control.post("/api/auth/token", json={"project": world.project["name"], "ttl_seconds": 60})
    assert by_cookie.status_code == 201
    fresh = httpx.Client(base_url=world.relay.control_url)
    by_bearer = fresh.post(
        "/api/auth/token",
        json={"project": world.project["name"]},
        headers={"Authorization": f"Bearer {login.json()['session']}"},
    )
    assert by_bearer.status_code == 201
    assert fresh.post("/api/auth/token", json={"project": world.project["name"]}).status_code == 401
    assert probe(world.relay, by_bearer.json()["token"]).status_code == 200
    # the admin token does not open user routes, and a session does not open admin routes
    admin_as_session = fresh.post(
        "/api/auth/token", json={"project": "x"}, headers=world.relay.control.headers
    )
    assert admin_as_session.status_code == 401
    as_admin = fresh.get("/api/teams", headers={"Authorization": f"Bearer {login.json()['session']}"})
    assert as_admin.status_code == 401


def test_bad_signature_and_foreign_issuer(world: World) -> None:
    token = world.token()["token"]
    head, _, sig = token.split(".")
    tampered_body = base64.urlsafe_b64encode(b'{"iss":"relay","sub":"user:x"}').rstrip(b"=").decode()
    assert_denied(
        probe(world.relay, f"{head}.{tampered_body}.{sig}"), 401, "unauthenticated", "invalid token"
    )
    forged = jwt.encode(
        jwt.decode(token, options={"verify_signature": False}),
        Ed25519PrivateKey.generate(),
        algorithm="EdDSA",
        headers={"kid": jwt.get_unverified_header(token)["kid"]},
    )
    assert_denied(probe(world.relay, forged), 401, "unauthenticated", "invalid token")
    assert_denied(probe(world.relay, "ey.not.valid"), 401, "unauthenticated", "invalid token")


def test_expired_token(world: World) -> None:
    token = world.token(ttl=1)["token"]
    time.sleep(1.6)
    assert_denied(probe(world.relay, token), 401, "unauthenticated", "token expired")


def test_revoke_one_token(world: World) -> None:
    one, two = world.token(), world.token()
    response = world.relay.api("DELETE", f"/api/tokens/{one['jti']}")
    assert response.status_code == 200
    assert_denied(probe(world.relay, one["token"]), 401, "token_revoked", "token revoked")
    assert probe(world.relay, two["token"]).status_code == 200
    assert world.relay.api("DELETE", "/api/tokens/unknown-jti").status_code == 404


def test_revoke_all_and_disable_user(world: World) -> None:
    one = world.token()
    bumped = world.relay.api("POST", f"/api/users/{world.user['id']}/revoke-tokens").json()
    assert bumped["token_version"] == world.user["token_version"] + 1
    assert_denied(probe(world.relay, one["token"]), 401, "token_revoked", "token revoked")
    two = world.token()
    assert probe(world.relay, two["token"]).status_code == 200
    world.relay.api("PATCH", f"/api/users/{world.user['id']}", {"enabled": False})
    assert_denied(probe(world.relay, two["token"]), 401, "token_revoked", "token revoked")
    world.relay.api("PATCH", f"/api/users/{world.user['id']}", {"enabled": True})
    assert_denied(probe(world.relay, two["token"]), 401, "token_revoked", "token revoked")  # version moved on
    assert (
        world.relay.api("GET", f"/api/users/{world.user['id']}").json()["token_version"]
        == bumped["token_version"] + 1
    )


def test_project_disabled_for_token(world: World) -> None:
    token = world.token()["token"]
    world.relay.api("PATCH", f"/api/projects/{world.project['id']}", {"enabled": False})
    assert_denied(probe(world.relay, token), 403, "project_unavailable", "project unavailable")
