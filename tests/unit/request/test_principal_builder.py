"""``auth.build_principal``, the one constructor of a Principal: a key, a token, and each refusal; and
``authenticate`` over a hand-built snapshot goes through it (owner and credential kind derived)."""

from __future__ import annotations

import hashlib
import time
from typing import Any

import pytest

from relay.crypto.sealing import SecretBox
from relay.crypto.tokens import TokenClaims, TokenSigner, generate_private_key
from relay.domain.credentials import hash_key
from relay.request.auth import authenticate, build_principal
from relay.snapshot import Policy, build_snapshot
from tests.fixtures.catalog_rows import catalog_tables, policy_row, relay_key_row

POLICY = Policy("pol_1", "default", (), (), "prioritized", (), False, True)
KEY_HASH = hashlib.sha256(b"rk_secret").hexdigest()
CLAIMS = TokenClaims(
    user_id="usr_1", project_id="prj_1", version=0, jti="jti_1", issued_at=0, expires_at=2_000_000_000
)


def _key(**over: Any) -> dict[str, Any]:
    given: dict[str, Any] = {
        "key_hash": KEY_HASH,
        "credential_id": "key_1",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_1",
        "project_id": "prj_1",
        "team_id": "tm_1",
    }
    return {**given, **over}


def _token(**over: Any) -> dict[str, Any]:
    given: dict[str, Any] = {
        "token": CLAIMS,
        "credential_id": "jti_1",
        "principal_kind": "user",
        "principal_id": "usr_1",
        "project_id": "prj_1",
        "team_id": "tm_1",
    }
    return {**given, **over}


def test_a_key_principal_is_owned_by_its_hash() -> None:
    p = build_principal(POLICY, **_key(), key_payload_logging=True)
    assert (p.credential_kind, p.credential_id, p.key_hash, p.owner) == ("key", "key_1", KEY_HASH, KEY_HASH)
    assert (p.principal_kind, p.principal_id, p.project_id, p.team_id) == (
        "serviceaccount",
        "sa_1",
        "prj_1",
        "tm_1",
    )
    assert p.policy is POLICY and p.policy_id == "pol_1"
    assert p.key_payload_logging and p.token is None
    assert not build_principal(POLICY, **_key()).key_payload_logging  # off unless asked (batch items)


def test_a_token_principal_is_owned_by_its_user() -> None:
    p = build_principal(POLICY, **_token())
    assert (p.credential_kind, p.credential_id, p.key_hash, p.owner) == ("token", "jti_1", None, "user:usr_1")
    assert (p.principal_kind, p.principal_id, p.project_id) == ("user", "usr_1", "prj_1")
    assert p.token is CLAIMS and not p.key_payload_logging


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ({**_key(), "token": CLAIMS}, "exactly one credential"),
        ({**_key(key_hash=None)}, "exactly one credential"),
        (_key(key_hash=""), "needs its sha256"),
        (_key(principal_kind="robot"), "unknown principal kind"),
        (_token(principal_kind="serviceaccount"), "the user, project and jti"),
        (_token(principal_id="usr_2"), "the user, project and jti"),
        (_token(project_id="prj_2"), "the user, project and jti"),
        (_token(credential_id="jti_2"), "the user, project and jti"),
        ({**_token(), "key_payload_logging": True}, "relay keys only"),
    ],
)
def test_an_inconsistent_credential_is_refused(given: dict[str, Any], refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        build_principal(POLICY, **given)


def _catalog(public_key: bytes) -> dict[str, list[dict[str, Any]]]:
    project = {"id": "prj_1", "name": "p", "team_id": "tm_1", "default_policy_id": "pol_1", "enabled": True}
    account = {"id": "sa_1", "name": "bot", "project_id": "prj_1", "policy_id": None, "enabled": True}
    user = {"id": "usr_1", "name": "ada", "email": "a@x.io", "enabled": True, "token_version": 0}
    return catalog_tables(
        teams=[{"id": "tm_1", "name": "ml"}],
        projects=[project],
        service_accounts=[account],
        users=[user],
        user_memberships=[{"user_id": "usr_1", "project_id": "prj_1", "policy_id": None, "position": 0}],
        policies=[policy_row()],
        relay_keys=[relay_key_row(key_hash=hash_key("rk_secret_value"), payload_logging=True)],
        signing_keys=[{"id": "sk_1", "public_key": public_key}],
    )


def test_authenticate_builds_key_and_token_principals_through_the_builder() -> None:
    private, public = generate_private_key()
    snap = build_snapshot(1, _catalog(public), SecretBox(b"m" * 32), {})
    by_key = authenticate("rk_secret_value", snap)
    assert (by_key.credential_kind, by_key.owner, by_key.team_id) == (
        "key",
        hash_key("rk_secret_value"),
        "tm_1",
    )
    assert (by_key.principal_id, by_key.key_payload_logging) == ("sa_1", True)
    token, claims = TokenSigner("sk_1", private).mint(
        user_id="usr_1", project_id="prj_1", version=0, ttl_s=600, now=time.time()
    )
    by_token = authenticate(token, snap)
    assert (by_token.credential_kind, by_token.owner, by_token.credential_id) == (
        "token",
        "user:usr_1",
        claims.jti,
    )
    assert by_token.token == claims and not by_token.key_payload_logging
