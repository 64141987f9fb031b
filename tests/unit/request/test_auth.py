"""Authentication (SPEC §3.1–§3.4) in-process over a hand-built snapshot: each relay-key and token
refusal with its status, code and message, the admission order, attribution and policy resolution,
the batch-owner form and the later recheck of recorded credentials."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from relay.crypto.tokens import TokenSigner, TokenVerifier, generate_private_key
from relay.domain.credentials import hash_key, read_credential
from relay.errors import RelayError
from relay.request.auth import (
    ADMIN_TOKEN_REFUSED,
    authenticate,
    authenticate_owner,
    recheck_key,
    recheck_token,
)
from tests.unit.request.conftest import CoreCatalog

PAST = datetime.now(UTC) - timedelta(hours=1)
FUTURE = datetime.now(UTC) + timedelta(hours=1)


def refused(catalog: CoreCatalog, credential: str | None) -> RelayError:
    with pytest.raises(RelayError) as caught:
        authenticate(credential, catalog.snapshot())
    return caught.value


def expect(error: RelayError, status: int, code: str, message: str) -> None:
    assert (error.status, error.code, str(error)) == (status, code, message)


# -- relay keys ------------------------------------------------------------------------------------


def test_a_good_key_carries_the_full_attribution(catalog: CoreCatalog) -> None:
    principal = authenticate(catalog.key, catalog.snapshot())
    assert principal.policy.id == catalog.policy.id
    assert (principal.project_id, principal.team_id) == (catalog.project.id, catalog.team.id)
    assert (principal.principal_kind, principal.principal_id) == ("serviceaccount", catalog.account.id)
    assert (principal.credential_kind, principal.credential_id) == ("key", catalog.relay_key.id)
    assert principal.key_hash == principal.owner == hash_key(catalog.key)


@pytest.mark.parametrize("credential", [None, ""])
def test_no_credential_is_401_missing_credential(catalog: CoreCatalog, credential: str | None) -> None:
    expect(refused(catalog, credential), 401, "unauthenticated", "missing credential")


def test_an_unknown_key_is_401_invalid_api_key(catalog: CoreCatalog) -> None:
    expect(refused(catalog, "sk-relay-not-a-key"), 401, "unauthenticated", "invalid api key")


@pytest.mark.parametrize("authorization", [None, "", "   "])
def test_no_header_at_all_says_only_missing_credential(
    catalog: CoreCatalog, authorization: str | None
) -> None:
    with pytest.raises(RelayError) as caught:
        authenticate(None, catalog.snapshot(), authorization=authorization)
    expect(caught.value, 401, "unauthenticated", "missing credential")


@pytest.mark.parametrize("authorization", ["KEY", "Token KEY", "Basic KEY"])
def test_a_key_sent_without_bearer_is_told_the_scheme(catalog: CoreCatalog, authorization: str) -> None:
    header = authorization.replace("KEY", catalog.key)
    for check in (authenticate, authenticate_owner):
        with pytest.raises(RelayError) as caught:
            check(read_credential(header, None), catalog.snapshot(), authorization=header)
        error = caught.value
        assert (error.status, error.code) == (401, "unauthenticated")
        assert str(error).startswith("missing credential: ") and "'Bearer <credential>'" in str(error)
        assert catalog.key not in str(error)  # the header's value is never repeated


def test_bearer_without_a_value_says_so(catalog: CoreCatalog) -> None:
    with pytest.raises(RelayError) as caught:
        authenticate(read_credential("Bearer ", None), catalog.snapshot(), authorization="Bearer ")
    assert (
        str(caught.value)
        == "missing credential: the Authorization header says Bearer but carries no credential"
    )


def test_the_admin_token_sent_for_inference_is_told_what_it_is(catalog: CoreCatalog) -> None:
    admin_token = "admin-token-0123456789abcdef"
    snapshot = replace(catalog.snapshot(), admin_token_hash=hash_key(admin_token))
    for check in (authenticate, authenticate_owner):
        with pytest.raises(RelayError) as caught:
            check(admin_token, snapshot)
        expect(caught.value, 401, "unauthenticated", ADMIN_TOKEN_REFUSED)
        assert str(caught.value).startswith(
            "invalid api key: this is the admin token"
        ) and admin_token not in str(caught.value)
    with pytest.raises(RelayError) as other:
        authenticate("sk-relay-not-a-key", snapshot)
    expect(other.value, 401, "unauthenticated", "invalid api key")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"enabled": False}, "api key disabled"),
        ({"revoked_at": PAST}, "api key revoked"),
        ({"expires_at": PAST}, "api key expired"),
        # the order is the contract: a disabled key that is also revoked and expired says "disabled"
        ({"enabled": False, "revoked_at": PAST, "expires_at": PAST}, "api key disabled"),
        ({"revoked_at": PAST, "expires_at": PAST}, "api key revoked"),
    ],
)
def test_each_key_refusal_in_spec_order(
    catalog: CoreCatalog, fields: dict[str, object], message: str
) -> None:
    catalog.build.change(catalog.relay_key, **fields)
    expect(refused(catalog, catalog.key), 401, "unauthenticated", message)


def test_a_key_expiring_later_is_admitted(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.relay_key, expires_at=FUTURE.replace(tzinfo=None))  # naive means UTC
    assert authenticate(catalog.key, catalog.snapshot()).credential_id == catalog.relay_key.id


def test_a_rotated_key_works_until_grace_until_then_says_rotated(catalog: CoreCatalog) -> None:
    new_plain = "sk-relay-core-rotated-new-value"
    catalog.build.change(
        catalog.relay_key,
        key_hash=hash_key(new_plain),
        previous_key_hash=hash_key(catalog.key),
        grace_until=FUTURE,
    )
    assert authenticate(catalog.key, catalog.snapshot()).credential_id == catalog.relay_key.id
    assert authenticate(new_plain, catalog.snapshot()).key_hash == hash_key(new_plain)
    catalog.build.change(catalog.relay_key, grace_until=PAST)
    expect(refused(catalog, catalog.key), 401, "unauthenticated", "api key rotated")
    catalog.build.change(catalog.relay_key, grace_until=None)
    expect(refused(catalog, catalog.key), 401, "unauthenticated", "api key rotated")
    assert authenticate(new_plain, catalog.snapshot()).credential_id == catalog.relay_key.id


@pytest.mark.parametrize("which", ["account", "project"])
def test_a_disabled_principal_or_project_disables_the_key(catalog: CoreCatalog, which: str) -> None:
    catalog.build.change(catalog.records[which], enabled=False)
    expect(refused(catalog, catalog.key), 401, "unauthenticated", "api key disabled")


def test_a_user_key_needs_the_user_still_a_member_of_its_project(catalog: CoreCatalog) -> None:
    user = catalog.build.user("ada", memberships={catalog.project.id: None})
    _, plaintext = catalog.build.key("ada", user=user, project=catalog.project)
    principal = authenticate(plaintext, catalog.snapshot())
    assert (principal.principal_kind, principal.principal_id) == ("user", user.id)
    assert principal.policy.id == catalog.policy.id  # the project's default policy
    catalog.build.change(user, memberships={})
    expect(refused(catalog, plaintext), 401, "unauthenticated", "api key disabled")


# -- policy resolution (§3.4) ----------------------------------------------------------------------


def test_the_key_policy_wins_then_the_account_then_the_project_default(catalog: CoreCatalog) -> None:
    on_key = catalog.build.policy("on-key")
    on_account = catalog.build.policy("on-account")
    catalog.build.change(catalog.relay_key, policy_id=on_key.id)
    catalog.build.change(catalog.account, policy_id=on_account.id)
    assert authenticate(catalog.key, catalog.snapshot()).policy.name == "on-key"
    catalog.build.change(catalog.relay_key, policy_id=None)
    assert authenticate(catalog.key, catalog.snapshot()).policy.name == "on-account"
    catalog.build.change(catalog.account, policy_id=None)
    assert authenticate(catalog.key, catalog.snapshot()).policy.name == "core-main"


def test_a_users_membership_policy_comes_before_the_project_default(catalog: CoreCatalog) -> None:
    member = catalog.build.policy("membership")
    user = catalog.build.user("bea", memberships={catalog.project.id: member.id})
    _, plaintext = catalog.build.key("bea", user=user, project=catalog.project)
    assert authenticate(plaintext, catalog.snapshot()).policy.name == "membership"


def test_no_governing_policy_is_403_no_policy(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.project, default_policy_id=None)
    expect(refused(catalog, catalog.key), 403, "no_policy", "no policy governs this credential")
    catalog.build.change(catalog.relay_key, policy_id="pol_deleted")
    assert refused(catalog, catalog.key).code == "no_policy"


def test_a_disabled_policy_is_403_policy_disabled(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.policy, enabled=False)
    error = refused(catalog, catalog.key)
    assert (error.status, error.code) == (403, "policy_disabled")


def test_the_batch_owner_needs_a_valid_credential_but_no_usable_policy(catalog: CoreCatalog) -> None:
    catalog.build.change(catalog.policy, enabled=False)
    assert authenticate_owner(catalog.key, catalog.snapshot()) == hash_key(catalog.key)
    catalog.build.change(catalog.relay_key, revoked_at=PAST)
    with pytest.raises(RelayError, match="api key revoked"):
        authenticate_owner(catalog.key, catalog.snapshot())


def test_recheck_key_gives_the_reason_a_recorded_key_stopped_working(catalog: CoreCatalog) -> None:
    recorded = hash_key(catalog.key)
    assert recheck_key(recorded, catalog.snapshot()) is None
    catalog.build.change(catalog.relay_key, expires_at=PAST)
    assert recheck_key(recorded, catalog.snapshot()) == "api key expired"
    assert recheck_key(hash_key("sk-relay-deleted"), catalog.snapshot()) == "invalid api key"


# -- inference tokens (§3.2) -----------------------------------------------------------------------


@pytest.fixture
def signer(catalog: CoreCatalog) -> TokenSigner:
    private, public = generate_private_key()
    catalog.build.verifier = TokenVerifier({"sig_core": public})
    return TokenSigner("sig_core", private)


@pytest.fixture
def member(catalog: CoreCatalog) -> str:
    return str(catalog.build.user("cy", memberships={catalog.project.id: None}, token_version=2).id)


def mint(
    signer: TokenSigner, catalog: CoreCatalog, user_id: str, *, version: int = 2, ttl_s: int = 600
) -> str:
    token, _ = signer.mint(user_id=user_id, project_id=catalog.project.id, version=version, ttl_s=ttl_s)
    return token


def test_a_good_token_carries_the_users_attribution(
    catalog: CoreCatalog, signer: TokenSigner, member: str
) -> None:
    token = mint(signer, catalog, member)
    principal = authenticate(token, catalog.snapshot())
    assert (principal.principal_kind, principal.principal_id, principal.credential_kind) == (
        "user",
        member,
        "token",
    )
    assert principal.token is not None and principal.credential_id == principal.token.jti
    assert (principal.owner, principal.key_hash) == (f"user:{member}", None)
    assert authenticate_owner(token, catalog.snapshot()) == f"user:{member}"


def test_a_token_signed_by_an_unknown_key_is_invalid(
    catalog: CoreCatalog, signer: TokenSigner, member: str
) -> None:
    other, _ = generate_private_key()
    token, _ = TokenSigner("sig_core", other).mint(
        user_id=member, project_id=catalog.project.id, version=2, ttl_s=60
    )
    expect(refused(catalog, token), 401, "unauthenticated", "invalid token")


def test_an_expired_token_is_token_expired(catalog: CoreCatalog, signer: TokenSigner, member: str) -> None:
    token = mint(signer, catalog, member, ttl_s=60)
    with pytest.raises(RelayError) as caught:
        authenticate(token, catalog.snapshot(), now=time.time() + 120)
    expect(caught.value, 401, "unauthenticated", "token expired")


def test_a_bumped_version_a_denylisted_jti_or_a_disabled_user_revoke_the_token(
    catalog: CoreCatalog, signer: TokenSigner, member: str
) -> None:
    stale = mint(signer, catalog, member, version=1)
    expect(refused(catalog, stale), 401, "token_revoked", "token revoked")
    token, claims = signer.mint(user_id=member, project_id=catalog.project.id, version=2, ttl_s=600)
    catalog.build.revoked_jtis[claims.jti] = FUTURE
    expect(refused(catalog, token), 401, "token_revoked", "token revoked")
    assert recheck_token(claims, catalog.snapshot()) == "token revoked"
    catalog.build.revoked_jtis.clear()
    catalog.build.change(catalog.build.users[member], enabled=False)
    expect(refused(catalog, token), 401, "token_revoked", "token revoked")


def test_a_disabled_project_or_a_left_membership_is_403_project_unavailable(
    catalog: CoreCatalog, signer: TokenSigner, member: str
) -> None:
    token = mint(signer, catalog, member)
    catalog.build.change(catalog.build.users[member], memberships={})
    error = refused(catalog, token)
    assert (error.status, error.code) == (403, "project_unavailable")
    catalog.build.change(catalog.build.users[member], memberships={catalog.project.id: None})
    catalog.build.change(catalog.project, enabled=False)
    expect(refused(catalog, token), 403, "project_unavailable", "project unavailable")


def test_an_admitted_key_is_remembered_per_snapshot_until_its_expiry(catalog: CoreCatalog) -> None:
    """The principal memo (``Snapshot.principals``) answers what the checks would: the same principal
    while the key is admitted, the §3.1 refusal from the moment it expires, and a new snapshot (a
    catalog change) is judged afresh."""
    expires = float(int(time.time()) + 3600)
    catalog.build.change(catalog.relay_key, expires_at=datetime.fromtimestamp(expires, UTC))
    snapshot = catalog.snapshot()
    first = authenticate(catalog.key, snapshot, now=expires - 10)
    assert authenticate(catalog.key, snapshot, now=expires - 1) is first  # remembered
    assert snapshot.principals[hash_key(catalog.key)][1] == expires
    with pytest.raises(RelayError) as expired:
        authenticate(catalog.key, snapshot, now=expires)
    expect(expired.value, 401, "unauthenticated", "api key expired")
    catalog.build.change(catalog.relay_key, enabled=False)  # a catalog change is a new snapshot
    with pytest.raises(RelayError) as disabled:
        authenticate(catalog.key, catalog.snapshot(), now=expires - 10)
    expect(disabled.value, 401, "unauthenticated", "api key disabled")


def test_a_rotated_keys_previous_value_is_remembered_only_until_its_grace_ends(catalog: CoreCatalog) -> None:
    grace = float(int(time.time()) + 600)
    catalog.build.change(
        catalog.relay_key,
        key_hash=hash_key("sk-relay-core-rotated-new-value"),
        previous_key_hash=hash_key(catalog.key),
        grace_until=datetime.fromtimestamp(grace, UTC),
    )
    snapshot = catalog.snapshot()
    assert authenticate(catalog.key, snapshot, now=grace - 5).credential_id == catalog.relay_key.id
    with pytest.raises(RelayError) as rotated:
        authenticate(catalog.key, snapshot, now=grace)
    expect(rotated.value, 401, "unauthenticated", "api key rotated")
    # the new value has no grace to outlive: remembered without an end
    authenticate("sk-relay-core-rotated-new-value", snapshot, now=grace - 5)
    assert snapshot.principals[hash_key("sk-relay-core-rotated-new-value")][1] == float("inf")
