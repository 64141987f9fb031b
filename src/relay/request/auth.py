"""Who is calling, and under which policy (SPEC §3.1–§3.4), judged against one catalog snapshot.

``authenticate`` turns a credential (relay key or inference token) into a :class:`Principal` carrying
the full attribution of §3.4, or raises the exact §3 error. It never touches the database: everything
it needs is in the snapshot, and token signatures are verified once per token (``inference_tokens``).
``build_principal`` is the one constructor of a principal, for a credential just presented or one
recorded earlier (a batch's submitter).

``recheck`` answers the same questions later, for work admitted earlier (batch items): given what was
recorded at submit (the key hash, or the token's claims), is the credential still valid *now*? It
returns the §3 reason, so callers can write ``credential no longer valid: <reason>``.

The admission order is part of the contract (a disabled key that is also expired says "disabled"),
so each check below is in SPEC order and each failure is raised where it is found.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from relay.crypto.tokens import TokenClaims, TokenExpired, TokenInvalid
from relay.domain.credentials import hash_key, looks_like_jwt, missing_credential
from relay.errors import Forbidden, Unauthenticated
from relay.snapshot import Policy, RelayKey, Snapshot


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller with its attribution (SPEC §3.4)."""

    policy: Policy
    project_id: str
    team_id: str
    principal_kind: str  # "serviceaccount" | "user"
    principal_id: str
    credential_kind: str  # "key" | "token"
    credential_id: str  # key id or token jti
    key_hash: str | None  # the sha256 presented (relay keys): owner of batches, usage attribution
    owner: str  # batch owner: the key hash, or "user:<id>" for tokens (SPEC §10.2 RelayKeyHash)
    key_payload_logging: bool
    token: TokenClaims | None = None

    @property
    def policy_id(self) -> str:
        return self.policy.id


def build_principal(
    policy: Policy,
    *,
    key_hash: str | None = None,
    token: TokenClaims | None = None,
    credential_id: str,
    principal_kind: str,
    principal_id: str,
    project_id: str,
    team_id: str,
    key_payload_logging: bool = False,
) -> Principal:
    """The one way a :class:`Principal` is made: from a credential — a relay key's sha256 or an
    inference token's claims, just presented (``authenticate``) or recorded at submit (a batch item's
    re-check) — its governing policy and its attribution (SPEC §3.4).

    ``credential_kind`` and ``owner`` follow from which credential it is (the key's sha256, or
    ``user:<id>`` for a token: SPEC §10.2 ``RelayKeyHash``). ValueError, a bug in the caller, when it is
    not exactly one of the two, when a token's attribution is not the user, project and jti it names,
    or when a token asks for a key's payload logging (only a key has that switch, SPEC §9)."""
    if (key_hash is None) == (token is None):
        raise ValueError("a principal has exactly one credential: a key hash or token claims")
    if principal_kind not in _PRINCIPAL_KINDS:
        raise ValueError(f"unknown principal kind {principal_kind!r}")
    if token is not None:
        named = (token.user_id, token.project_id, token.jti)
        if principal_kind != "user" or (principal_id, project_id, credential_id) != named:
            raise ValueError("a token's principal is the user, project and jti its claims name")
        if key_payload_logging:
            raise ValueError("payload logging by key applies to relay keys only")
        return Principal(
            policy=policy,
            project_id=project_id,
            team_id=team_id,
            principal_kind="user",
            principal_id=principal_id,
            credential_kind="token",
            credential_id=credential_id,
            key_hash=None,
            owner=f"user:{principal_id}",
            key_payload_logging=False,
            token=token,
        )
    if not key_hash:
        raise ValueError("a key credential needs its sha256")
    return Principal(
        policy=policy,
        project_id=project_id,
        team_id=team_id,
        principal_kind=principal_kind,
        principal_id=principal_id,
        credential_kind="key",
        credential_id=credential_id,
        key_hash=key_hash,
        owner=key_hash,
        key_payload_logging=key_payload_logging,
    )


_PRINCIPAL_KINDS = frozenset({"serviceaccount", "user"})

ADMIN_TOKEN_REFUSED = (
    "invalid api key: this is the admin token (RELAY_ADMIN_TOKEN), which works on the control plane "
    "only; inference and batch calls need a relay key (relay keys create) or an inference token"
)


def authenticate(
    credential: str | None, snapshot: Snapshot, now: float | None = None, *, authorization: str | None = None
) -> Principal:
    """The caller as a :class:`Principal`, or the §3 refusal. ``authorization``: the raw header, read
    only when no credential was found, to say what was wrong with it (``missing_credential``)."""
    if not credential:
        raise Unauthenticated(missing_credential(authorization))
    current = time.time() if now is None else now
    if looks_like_jwt(credential):
        return _from_token(credential, snapshot, current)
    return _from_key(hash_key(credential), snapshot, current)


def authenticate_owner(
    credential: str | None, snapshot: Snapshot, now: float | None = None, *, authorization: str | None = None
) -> str:
    """Who is calling, as a batch owner (SPEC §10.8: the key's sha256, or ``user:<id>`` for a token),
    after every §3 credential check but without resolving a policy: reading, collecting and cancelling
    one's own batches needs a valid credential, not a usable policy (a batch whose policy was disabled
    can still be read, which is how its owner learns why its items failed)."""
    if not credential:
        raise Unauthenticated(missing_credential(authorization))
    current = time.time() if now is None else now
    if looks_like_jwt(credential):
        return f"user:{_checked_claims(credential, snapshot, current).user_id}"
    key_hash = hash_key(credential)
    _checked_key(key_hash, snapshot, current)
    return key_hash


def _find_key(key_hash: str, snapshot: Snapshot) -> tuple[RelayKey | None, bool]:
    """The key with this hash, or the key it was rotated into (then ``True``: the previous hash)."""
    key = snapshot.key_by_hash.get(key_hash)
    if key is not None:
        return key, False
    key = snapshot.key_by_previous_hash.get(key_hash)
    return key, key is not None


def _checked_key(key_hash: str, snapshot: Snapshot, now: float) -> RelayKey:
    key, rotated = _find_key(key_hash, snapshot)
    if key is None:
        if key_hash == snapshot.admin_token_hash:
            raise Unauthenticated(ADMIN_TOKEN_REFUSED)
        raise Unauthenticated("invalid api key")
    reason = key_problem(key, snapshot, now, presented_previous=rotated)
    if reason is not None:
        raise Unauthenticated(reason)
    return key


PRINCIPAL_MEMO_SIZE = 100_000
"""Relay keys whose principal is remembered per snapshot (``Snapshot.principals``); past that, each
further key is worked out on every request."""


def _from_key(key_hash: str, snapshot: Snapshot, now: float) -> Principal:
    """The key's principal. Everything it depends on is in the snapshot but the clock, so an admitted
    key's principal is remembered per snapshot until the first moment a check could change its answer
    (its expiry, or the end of its rotation grace): a repeat caller costs the hash and one lookup."""
    memo = snapshot.principals
    hit = memo.get(key_hash)
    if hit is not None and now < hit[1]:
        return hit[0]  # type: ignore[no-any-return]
    key = _checked_key(key_hash, snapshot, now)
    project_id, principal_id = _key_scope(key, snapshot)
    policy = resolve_policy(snapshot, key.policy_id, key.principal_kind, principal_id, project_id)
    principal = build_principal(
        policy,
        key_hash=key_hash,
        credential_id=key.id,
        principal_kind=key.principal_kind,
        principal_id=principal_id,
        project_id=project_id,
        team_id=snapshot.projects[project_id].team_id,
        key_payload_logging=key.payload_logging,
    )
    if len(memo) < PRINCIPAL_MEMO_SIZE:
        memo[key_hash] = (principal, _admitted_until(key, rotated=_find_key(key_hash, snapshot)[1]))
    return principal


def _admitted_until(key: RelayKey, *, rotated: bool) -> float:
    """When an admitted key's §3.1 answer can next change with the clock alone."""
    until = _ts(key.expires_at) if key.expires_at is not None else float("inf")
    if rotated and key.grace_until is not None:
        until = min(until, _ts(key.grace_until))
    return until


def key_problem(key: RelayKey, snapshot: Snapshot, now: float, *, presented_previous: bool) -> str | None:
    """The §3.1 admission checks after the hash lookup, in SPEC order; None when the key is good."""
    if not key.enabled:
        return "api key disabled"
    if key.revoked_at is not None:
        return "api key revoked"
    if key.expires_at is not None and _ts(key.expires_at) <= now:
        return "api key expired"
    if presented_previous and (key.grace_until is None or _ts(key.grace_until) <= now):
        return "api key rotated"
    try:
        project_id, principal_id = _key_scope(key, snapshot)
    except LookupError:
        return "api key disabled"
    principal_enabled = (
        snapshot.service_accounts[principal_id].enabled
        if key.principal_kind == "serviceaccount"
        else snapshot.users[principal_id].enabled
    )
    if not principal_enabled or not snapshot.projects[project_id].enabled:
        return "api key disabled"
    return None


def _key_scope(key: RelayKey, snapshot: Snapshot) -> tuple[str, str]:
    """(project id, principal id) of a key; LookupError when its principal or project is gone."""
    if key.principal_kind == "serviceaccount":
        account = snapshot.service_accounts[key.service_account_id or ""]
        return account.project_id, account.id
    user = snapshot.users[key.user_id or ""]
    project_id = key.project_id or ""
    if project_id not in snapshot.projects or project_id not in user.memberships:
        raise LookupError(project_id)  # the project is gone or the user left it: the key is disabled
    return project_id, user.id


def _checked_claims(token: str, snapshot: Snapshot, now: float) -> TokenClaims:
    try:
        claims = snapshot.verifier.verify(token, now)
    except TokenExpired:
        raise Unauthenticated("token expired") from None
    except TokenInvalid:
        raise Unauthenticated("invalid token") from None
    problem = token_problem(claims, snapshot, now)
    if problem is not None:
        status, code, message = problem
        if status == 403:
            raise Forbidden(message, code=code)
        raise Unauthenticated(message, code=code)
    return claims


def _from_token(token: str, snapshot: Snapshot, now: float) -> Principal:
    claims = _checked_claims(token, snapshot, now)
    policy = resolve_policy(snapshot, None, "user", claims.user_id, claims.project_id)
    return build_principal(
        policy,
        token=claims,
        credential_id=claims.jti,
        principal_kind="user",
        principal_id=claims.user_id,
        project_id=claims.project_id,
        team_id=snapshot.projects[claims.project_id].team_id,
    )


def token_problem(claims: TokenClaims, snapshot: Snapshot, now: float) -> tuple[int, str, str] | None:
    """The §3.2 checks after signature verification: (status, code, message), or None when good."""
    if claims.expires_at <= now:
        return 401, "unauthenticated", "token expired"
    user = snapshot.users.get(claims.user_id)
    if user is None or user.token_version != claims.version or claims.jti in snapshot.revoked_jtis:
        return 401, "token_revoked", "token revoked"
    if not user.enabled:
        return 401, "token_revoked", "token revoked"
    project = snapshot.projects.get(claims.project_id)
    if project is None or not project.enabled:
        return 403, "project_unavailable", "project unavailable"
    if claims.project_id not in user.memberships:
        return 403, "project_unavailable", "user is no longer a member of the project"
    return None


def resolve_policy(
    snapshot: Snapshot, key_policy_id: str | None, principal_kind: str, principal_id: str, project_id: str
) -> Policy:
    """SPEC §3.4: the key's policy, else the service account's (or the user's membership) policy, else
    the project's default policy."""
    policy_id = key_policy_id
    if policy_id is None:
        if principal_kind == "serviceaccount":
            policy_id = snapshot.service_accounts[principal_id].policy_id
        else:
            policy_id = snapshot.users[principal_id].memberships.get(project_id)
    if policy_id is None:
        policy_id = snapshot.projects[project_id].default_policy_id
    if policy_id is None:
        raise Forbidden("no policy governs this credential", code="no_policy")
    policy = snapshot.policies.get(policy_id)
    if policy is None:
        raise Forbidden("no policy governs this credential", code="no_policy")
    if not policy.enabled:
        raise Forbidden(f"policy {policy.name!r} is disabled", code="policy_disabled")
    return policy


def recheck_key(key_hash: str, snapshot: Snapshot, now: float | None = None) -> str | None:
    """Is the relay key recorded at submit still valid? The §3.1 reason when not, else None."""
    current = time.time() if now is None else now
    key, presented_previous = _find_key(key_hash, snapshot)
    if key is None:
        # Deleted, or rotated twice since (a key remembers only its previous hash).
        return "invalid api key"
    return key_problem(key, snapshot, current, presented_previous=presented_previous)


def recheck_token(claims: TokenClaims, snapshot: Snapshot, now: float | None = None) -> str | None:
    """Is the inference token recorded at submit still valid? The §3.2 reason when not, else None."""
    problem = token_problem(claims, snapshot, time.time() if now is None else now)
    return None if problem is None else problem[2]


def _ts(value: datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()
