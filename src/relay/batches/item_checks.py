"""The checks of SPEC §10.6 a batch item passes before it may start, in their order: its stored request
parses, its submitter's credential and recorded policy still hold against the current snapshot, its
model routes (§4 step 5). Each failure is a :class:`Discard` carrying the §10.4 error kind and text."""

from __future__ import annotations

import orjson

from relay.batches.item_shapes import wire_request
from relay.crypto.tokens import TokenClaims
from relay.domain.batch_record import BatchRecord
from relay.errors import RelayError
from relay.request.auth import Principal, build_principal, recheck_key, recheck_token
from relay.request.fallbacks import NotAdmitted, Route, route
from relay.request.routing import Plan
from relay.snapshot import Snapshot


class Discard(Exception):
    """An item fails before the pipeline answers: its error kind and text (SPEC §10.4)."""

    def __init__(self, kind: str, message: str, *, status: int = 0, attempts: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.attempts = attempts


def principal_of(batch: BatchRecord, snap: Snapshot, known: Principal | None = None) -> Principal:
    """The submitter as of NOW: the credential re-checked (§3 rules), the recorded policy current.
    ``known``: what this answered before for the same ``batch`` record (the claim's items share
    one); reused, not rebuilt, while its policy is still the snapshot's (the rest comes from the
    record). The checks run every time: a credential may expire between two items."""
    claims: TokenClaims | None = None
    if batch.key_hash is not None:
        reason = recheck_key(batch.key_hash, snap)
    else:
        claims = TokenClaims(**(batch.token_claims or {}))
        reason = recheck_token(claims, snap)
    if reason is not None:
        raise Discard("credential_invalid", f"credential no longer valid: {reason}")
    policy = snap.policies.get(batch.policy_id)
    if policy is None:
        raise Discard("policy_unavailable", f'policy unavailable: policy "{batch.policy_name}" was deleted')
    if not policy.enabled:
        raise Discard("policy_unavailable", f'policy unavailable: policy "{policy.name}" is disabled')
    if known is not None and known.policy is policy:
        return known
    return build_principal(  # key_payload_logging stays off: SPEC §9, batch items are never captured
        policy,
        key_hash=batch.key_hash,
        token=claims,
        credential_id=batch.credential_id,
        principal_kind=batch.principal_kind,
        principal_id=batch.principal_id,
        project_id=batch.project_id,
        team_id=batch.team_id,
    )


def parse_item(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise Discard("load_input", "load input: the stored request is not valid JSON") from None
    if not isinstance(body, dict):
        raise Discard("load_input", "load input: the stored request is not a JSON object")
    return body


def route_item(principal: Principal, body: dict, snap: Snapshot, inbound: str, max_tokens: int) -> Route:
    """The item's plan and fallbacks (SPEC §4 step 5: a batch item only falls back to models of its
    own shape, or under ``batch.translate`` to any it can be translated to), or the §10.4 failure."""
    model = body.get("model")
    if model is None:
        raise Discard("missing_model", "routing: request body has no 'model'")
    if not isinstance(model, str) or not model.strip():
        raise Discard("missing_model", "routing: 'model' must be a non-empty string")

    def admit_plan(plan: Plan) -> tuple[str, dict]:
        return wire_request(inbound, plan, body, principal.policy.batch.translate, max_tokens)

    try:
        return route(principal.policy, model, snap, admit_plan)
    except NotAdmitted as refused:
        raise Discard(refused.error.code, refused.error.message) from None
    except RelayError as exc:
        raise Discard(exc.code, f"routing: {exc.message}") from None
