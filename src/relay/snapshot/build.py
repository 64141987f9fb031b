"""The :class:`Snapshot` (the whole catalog with the hot path's indexes) and ``build_snapshot``.

What it does. ``build_snapshot`` turns the raw catalog tables (``store.catalog.load_catalog``) into one
immutable :class:`Snapshot`: it groups the child rows (memberships, aliases, key pools) by parent in
their written order, makes each object with its type's ``from_row`` (``relay.snapshot.entities``), opens
host-key values once (sealed under the master key, or read from the environment), and builds the
indexes live requests need (model by name or alias, host by name, a model's bindings in creation
order, relay key by hash and by previous hash).

What it deliberately does not know. The database (the reloader reads the rows and swaps snapshots),
HTTP, and how requests use the indexes.

Invariants. Pure: no I/O, same rows → same snapshot (but ``loaded_at``). Every mapping is read-only.
Catalog entries that cannot be used as configured are named in ``problems``, never raised: one bad host
key must not take the whole catalog down. The token verifier (and its cache of verified tokens) carries
over from the previous snapshot while the set of signing keys is unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from relay.crypto.sealing import SecretBox
from relay.crypto.tokens import TokenVerifier
from relay.domain.guardrails import Guardrail
from relay.snapshot.entities import (
    Binding,
    Host,
    HostKey,
    Model,
    Policy,
    Project,
    RelayKey,
    Row,
    ServiceAccount,
    Team,
    User,
)


def _freeze(items: dict[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(items)


@dataclass(frozen=True)
class Snapshot:
    revision: int
    loaded_at: float
    teams: Mapping[str, Team] = field(default_factory=dict)
    projects: Mapping[str, Project] = field(default_factory=dict)
    service_accounts: Mapping[str, ServiceAccount] = field(default_factory=dict)
    users: Mapping[str, User] = field(default_factory=dict)
    hosts: Mapping[str, Host] = field(default_factory=dict)
    host_keys: Mapping[str, HostKey] = field(default_factory=dict)
    models: Mapping[str, Model] = field(default_factory=dict)
    bindings: Mapping[str, Binding] = field(default_factory=dict)
    policies: Mapping[str, Policy] = field(default_factory=dict)
    relay_keys: Mapping[str, RelayKey] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    # indexes for the hot path
    model_by_name: Mapping[str, Model] = field(default_factory=dict)  # names and aliases
    host_by_name: Mapping[str, Host] = field(default_factory=dict)
    bindings_by_model: Mapping[str, tuple[Binding, ...]] = field(default_factory=dict)
    key_by_hash: Mapping[str, RelayKey] = field(default_factory=dict)
    key_by_previous_hash: Mapping[str, RelayKey] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # catalog entries that cannot be used as configured (for the log)
    # credentials
    verifier: TokenVerifier = field(default_factory=lambda: TokenVerifier({}))
    signing_key_ids: frozenset[str] = frozenset()
    revoked_jtis: Mapping[str, datetime] = field(default_factory=dict)
    # sha256 of RELAY_ADMIN_TOKEN: never a credential of the inference plane, only recognised there so
    # that an admin token sent for inference is told why it fails (not just "invalid api key").
    admin_token_hash: str | None = None
    # routing's "did you mean" per (policy id, unknown model name), worked out once per snapshot: a
    # batch of 50 000 items naming one mistyped model compares names once, not 50 000 times.
    suggestions: dict[tuple[str, str], str | None] = field(default_factory=dict, compare=False, repr=False)
    # The hot path's answers that depend on this snapshot alone, worked out on a credential's or a
    # model's first request and reused until the catalog changes: routing's plan per (policy id,
    # requested model) and a relay key's principal per key hash (``relay.request.routing``,
    # ``relay.request.auth``). Bounded there; a new snapshot starts empty.
    plans: dict[tuple[str, str], tuple[Any, Any]] = field(default_factory=dict, compare=False, repr=False)
    principals: dict[str, tuple[Any, float]] = field(default_factory=dict, compare=False, repr=False)

    def counts(self) -> dict[str, int]:
        return {
            "teams": len(self.teams),
            "projects": len(self.projects),
            "service_accounts": len(self.service_accounts),
            "users": len(self.users),
            "hosts": len(self.hosts),
            "host_keys": len(self.host_keys),
            "models": len(self.models),
            "bindings": len(self.bindings),
            "policies": len(self.policies),
            "keys": len(self.relay_keys),
        }


def build_snapshot(
    revision: int,
    rows: Mapping[str, list[dict[str, Any]]],
    box: SecretBox,
    env: Mapping[str, str],
    previous: Snapshot | None = None,
    *,
    admin_token_hash: str | None = None,
) -> Snapshot:
    """A snapshot from the raw tables (``store.catalog.load_catalog``). Pure: no I/O."""
    problems: list[str] = []
    public_keys = {r["id"]: bytes(r["public_key"]) for r in rows.get("signing_keys", [])}
    key_ids = frozenset(public_keys)
    if previous is not None and previous.signing_key_ids == key_ids:
        verifier = previous.verifier
    else:
        verifier = TokenVerifier(public_keys)
    memberships = _by_parent(rows["user_memberships"], "user_id")
    aliases = {m: [r["alias"] for r in rs] for m, rs in _by_parent(rows["model_aliases"], "model_id").items()}
    pools = _by_parent(rows["policy_host_keys"], "policy_id")

    teams = {r["id"]: Team.from_row(r) for r in rows["teams"]}
    projects = {r["id"]: Project.from_row(r) for r in rows["projects"]}
    service_accounts = {r["id"]: ServiceAccount.from_row(r) for r in rows["service_accounts"]}
    users = {
        r["id"]: User.from_row(r, {m["project_id"]: m["policy_id"] for m in memberships.get(r["id"], ())})
        for r in rows["users"]
    }
    hosts = {r["id"]: Host.from_row(r) for r in rows["hosts"]}
    host_keys = {r["id"]: HostKey.from_row(r, _key_value(r, box, env, problems)) for r in rows["host_keys"]}
    models = {r["id"]: Model.from_row(r, tuple(aliases.get(r["id"], ()))) for r in rows["models"]}
    ordered_bindings = sorted(rows["bindings"], key=lambda r: (r["created_at"], r["id"]))
    bindings = {r["id"]: Binding.from_row(r) for r in ordered_bindings}
    problems.extend(
        f"binding {b.name} has no pricing: its calls cost nothing in usage (cost_nanos null) "
        "and spend limits do not count them; set pricing, or pricing: from_catalog"
        for b in bindings.values()
        if b.enabled and b.unpriced
    )
    model_ids = _model_ids(models.values(), aliases)
    guardrails = {r["id"]: Guardrail.from_row(r) for r in rows.get("guardrails", ())}
    attached = _by_parent(rows.get("policy_guardrails", ()), "policy_id")
    policies = {
        r["id"]: Policy.from_row(
            r,
            tuple(p["host_key_id"] for p in pools.get(r["id"], ())),
            model_ids,
            tuple(guardrails[g["guardrail_id"]] for g in attached.get(r["id"], ())),
        )
        for r in rows["policies"]
    }
    relay_keys = {r["id"]: RelayKey.from_row(r) for r in rows["relay_keys"]}
    model_by_name: dict[str, Model] = {}
    for model in models.values():
        model_by_name[model.name] = model
        for alias in model.aliases:
            model_by_name[alias] = model
    by_model: dict[str, list[Binding]] = {}
    for binding in bindings.values():
        by_model.setdefault(binding.model_id, []).append(binding)

    return Snapshot(
        revision=revision,
        loaded_at=time.time(),
        teams=_freeze(teams),
        projects=_freeze(projects),
        service_accounts=_freeze(service_accounts),
        users=_freeze(users),
        hosts=_freeze(hosts),
        host_keys=_freeze(host_keys),
        models=_freeze(models),
        bindings=_freeze(bindings),
        policies=_freeze(policies),
        relay_keys=_freeze(relay_keys),
        settings=_freeze({r["key"]: r["value"] for r in rows["settings"]}),
        model_by_name=_freeze(model_by_name),
        host_by_name=_freeze({h.name: h for h in hosts.values()}),
        bindings_by_model=_freeze({k: tuple(v) for k, v in by_model.items()}),
        key_by_hash=_freeze({k.key_hash: k for k in relay_keys.values()}),
        key_by_previous_hash=_freeze(
            {k.previous_key_hash: k for k in relay_keys.values() if k.previous_key_hash}
        ),
        problems=tuple(problems),
        verifier=verifier,
        signing_key_ids=key_ids,
        revoked_jtis=_freeze({r["jti"]: r["expires_at"] for r in rows.get("revoked_tokens", [])}),
        admin_token_hash=admin_token_hash,
    )


def _by_parent(rows: Iterable[Row], parent: str) -> dict[str, list[Row]]:
    """Child rows (memberships, aliases, pool entries) grouped by their parent's id, in ``position``
    order."""
    grouped: dict[str, list[Row]] = {}
    for row in sorted(rows, key=lambda r: r["position"]):
        grouped.setdefault(row[parent], []).append(row)
    return grouped


def _model_ids(models: Iterable[Model], aliases: Mapping[str, list[str]]) -> dict[str, str]:
    """Model name or alias → model id, for keying policy fallbacks: a name wins over an alias."""
    ids = {m.name: m.id for m in models}
    for model_id, names in aliases.items():
        for alias in names:
            ids.setdefault(alias, model_id)
    return ids


def _key_value(row: Row, box: SecretBox, env: Mapping[str, str], problems: list[str]) -> str | None:
    if row["value_encrypted"] is not None:
        try:
            return box.open(row["value_encrypted"], bound_to=row["id"])
        except ValueError:
            problems.append(f"host key {row['name']} does not decrypt with this master key; it is not used")
            return None
    value = env.get(row["value_from_env"] or "")
    if not value:
        problems.append(f"host key {row['name']}: environment variable {row['value_from_env']} is unset")
    return value or None
