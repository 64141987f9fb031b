"""The catalog snapshot that serves the hot path, and the reloader that keeps it current.

A :class:`Snapshot` is an immutable picture of the whole catalog with the indexes live requests need
(key hash → key, model name/alias → model, model → bindings in creation order …). Request handlers
read ``reloader.snapshot`` once per request and use that object throughout, so a concurrent reload
can never show a request half of two catalogs. Rebuilding creates a new object and swaps one
reference (atomic in CPython).

A write through this replica's control plane reloads before it answers (read-your-writes: a key
created here works here at once). The reloader also wakes on a change notice (``store.notify``) and
polls the catalog revision every ``poll_interval`` seconds, so a write on any replica is visible
everywhere within about a second even if a notice is lost. Upstream key values are decrypted once
per rebuild, not per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.grants import Grant, parse_grant
from relay.domain.ratelimits import RateLimitRule
from relay.inference_tokens import TokenVerifier
from relay.pricing import NanoPrices, nano_prices
from relay.sealing import SecretBox
from relay.store import catalog as store
from relay.store.notify import ChangeFeed

log = logging.getLogger("relay.catalog")


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class Project:
    id: str
    name: str
    team_id: str
    default_policy_id: str | None
    enabled: bool


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    id: str
    name: str
    project_id: str
    policy_id: str | None
    enabled: bool


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str
    email: str
    enabled: bool
    token_version: int
    memberships: Mapping[str, str | None]  # project id -> membership policy id


@dataclass(frozen=True, slots=True)
class Host:
    id: str
    name: str
    base_url: str
    enabled: bool


@dataclass(frozen=True, slots=True)
class HostKey:
    id: str
    name: str
    host_id: str
    value: str | None  # None when it cannot be had (env var unset, undecryptable): never selected
    enabled: bool
    version: str  # changes whenever the key is edited: an edit re-arms an auth-failed breaker


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    name: str
    provider: str
    aliases: tuple[str, ...]
    enabled: bool


@dataclass(frozen=True, slots=True)
class Binding:
    id: str
    name: str
    model_id: str
    host_id: str
    adapter: str
    upstream_name: str | None
    pricing: Mapping[str, float | None] | None
    enabled: bool
    # ``pricing`` as integer nano-USD per million tokens, computed once per snapshot: what budget
    # commits price a call with on the hot path (relay.pricing.nano_prices).
    prices: NanoPrices | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    id: str
    name: str
    grants: tuple[Grant, ...]
    host_key_ids: tuple[str, ...]
    key_selection: str
    rules: tuple[RateLimitRule, ...]
    payload_logging: bool
    enabled: bool
    # SPEC §4 step 5: model id → the names of the models to try after it, in order (as written; they
    # are looked up when a request needs them, so a model renamed or deleted since is simply skipped).
    fallbacks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RelayKey:
    id: str
    name: str
    key_hash: str
    prefix: str
    principal_kind: str
    service_account_id: str | None
    user_id: str | None
    project_id: str | None
    policy_id: str | None
    enabled: bool
    expires_at: datetime | None
    revoked_at: datetime | None
    previous_key_hash: str | None
    grace_until: datetime | None
    payload_logging: bool


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
) -> Snapshot:
    """A snapshot from the raw tables (``store.catalog.load_catalog``). Pure: no I/O.

    The token verifier (and its cache of verified tokens) carries over from ``previous`` while the set
    of signing keys is unchanged."""
    problems: list[str] = []
    public_keys = {r["id"]: bytes(r["public_key"]) for r in rows.get("signing_keys", [])}
    key_ids = frozenset(public_keys)
    if previous is not None and previous.signing_key_ids == key_ids:
        verifier = previous.verifier
    else:
        verifier = TokenVerifier(public_keys)
    memberships: dict[str, dict[str, str | None]] = {}
    for m in sorted(rows["user_memberships"], key=lambda r: r["position"]):
        memberships.setdefault(m["user_id"], {})[m["project_id"]] = m["policy_id"]
    aliases: dict[str, list[str]] = {}
    for a in sorted(rows["model_aliases"], key=lambda r: r["position"]):
        aliases.setdefault(a["model_id"], []).append(a["alias"])
    pools: dict[str, list[str]] = {}
    for p in sorted(rows["policy_host_keys"], key=lambda r: r["position"]):
        pools.setdefault(p["policy_id"], []).append(p["host_key_id"])

    teams = {r["id"]: Team(r["id"], r["name"]) for r in rows["teams"]}
    projects = {
        r["id"]: Project(r["id"], r["name"], r["team_id"], r["default_policy_id"], r["enabled"])
        for r in rows["projects"]
    }
    service_accounts = {
        r["id"]: ServiceAccount(r["id"], r["name"], r["project_id"], r["policy_id"], r["enabled"])
        for r in rows["service_accounts"]
    }
    users = {
        r["id"]: User(
            r["id"],
            r["name"],
            r["email"],
            r["enabled"],
            r["token_version"],
            _freeze(memberships.get(r["id"], {})),
        )
        for r in rows["users"]
    }
    hosts = {r["id"]: Host(r["id"], r["name"], r["base_url"], r["enabled"]) for r in rows["hosts"]}
    host_keys = {
        r["id"]: HostKey(
            r["id"],
            r["name"],
            r["host_id"],
            _key_value(r, box, env, problems),
            r["enabled"],
            str(r["updated_at"]),
        )
        for r in rows["host_keys"]
    }
    models = {
        r["id"]: Model(r["id"], r["name"], r["provider"], tuple(aliases.get(r["id"], ())), r["enabled"])
        for r in rows["models"]
    }
    ordered_bindings = sorted(rows["bindings"], key=lambda r: (r["created_at"], r["id"]))
    bindings = {
        r["id"]: Binding(
            r["id"],
            r["name"],
            r["model_id"],
            r["host_id"],
            r["adapter"],
            r["upstream_name"],
            _freeze(dict(r["pricing"])) if r["pricing"] else None,
            r["enabled"],
            nano_prices(r["pricing"]),
        )
        for r in ordered_bindings
    }
    for binding in bindings.values():
        if binding.enabled and binding.prices is None and _unpriced(binding.pricing):
            problems.append(
                f"binding {binding.name} has no pricing: its calls cost nothing in usage (cost_nanos null) "
                "and spend limits do not count them; set pricing, or pricing: from_catalog"
            )
    policies = {
        r["id"]: Policy(
            r["id"],
            r["name"],
            tuple(parse_grant(g) for g in r["models"]),
            tuple(pools.get(r["id"], ())),
            r["key_selection"],
            tuple(RateLimitRule.model_validate(x) for x in r["rate_limit"].get("rules", [])),
            r["payload_logging"],
            r["enabled"],
            _fallbacks(r.get("fallbacks"), models, aliases),
        )
        for r in rows["policies"]
    }
    relay_keys = {r["id"]: RelayKey(**{f: r[f] for f in RelayKey.__slots__}) for r in rows["relay_keys"]}

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
    )


def _fallbacks(
    written: Mapping[str, list[str]] | None, models: Mapping[str, Model], aliases: Mapping[str, list[str]]
) -> Mapping[str, tuple[str, ...]]:
    """A policy's ``fallbacks`` keyed by model id (the key may be written as a name or an alias)."""
    if not written:
        return _EMPTY
    ids = {m.name: m.id for m in models.values()}
    for model_id, names in aliases.items():
        for alias in names:
            ids.setdefault(alias, model_id)
    return _freeze({ids[k]: tuple(v) for k, v in written.items() if k in ids})


_EMPTY: Mapping[str, tuple[str, ...]] = MappingProxyType({})


def _unpriced(pricing: Mapping[str, Any] | None) -> bool:
    return pricing is None or not all(isinstance(pricing.get(k), int | float) for k in ("input", "output"))


def _key_value(
    row: Mapping[str, Any], box: SecretBox, env: Mapping[str, str], problems: list[str]
) -> str | None:
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


class CatalogReloader:
    """Owns the current snapshot; rebuilds it on notice or when the stored revision moves."""

    def __init__(
        self,
        engine: AsyncEngine,
        feed: ChangeFeed,
        box: SecretBox,
        env: Mapping[str, str],
        *,
        poll_interval: float = 1.0,
    ) -> None:
        self._engine = engine
        self._feed = feed
        self._box = box
        self._env = env
        self._poll_interval = poll_interval
        self._task: asyncio.Task[None] | None = None
        self.snapshot = Snapshot(revision=-1, loaded_at=0.0)

    async def reload(self) -> Snapshot:
        async with self._engine.connect() as conn:
            revision = await store.read_revision(conn)
            rows = await store.load_catalog(conn)
        current = self.snapshot
        if revision < current.revision:
            return current  # a concurrent reload already swapped in something newer: never go back
        fresh = build_snapshot(revision, rows, self._box, self._env, current)
        self.snapshot = fresh
        for problem in fresh.problems:
            if problem not in current.problems:
                log.warning(problem)
        log.debug("catalog snapshot at revision %d", revision)
        return fresh

    async def start(self) -> None:
        await self.reload()
        await self._feed.start()
        self._task = asyncio.create_task(self._run(), name="relay-catalog-reloader")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._feed.stop()

    async def _run(self) -> None:
        while True:
            woken = await self._feed.wait(self._poll_interval)
            try:
                if woken:
                    await self.reload()
                    continue
                async with self._engine.connect() as conn:
                    revision = await store.read_revision(conn)
                if revision != self.snapshot.revision:
                    await self.reload()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database may be restarting: keep serving the last snapshot
                log.warning("catalog reload failed (%s); keeping revision %d", exc, self.snapshot.revision)
