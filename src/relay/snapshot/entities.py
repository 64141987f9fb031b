"""The catalog objects a snapshot holds, each a frozen value made from its table row by ``from_row``.

What it does. One dataclass per catalog kind the hot path reads (teams, projects, service accounts,
users, hosts, host keys, models, bindings, policies, relay keys). Each ``from_row`` reads one row of its
table (as ``store.catalog.load_catalog`` returns it, columns by name) plus what the snapshot builder
gathered from the child tables for it: a user's memberships, a model's aliases, a policy's key pool.

What it deliberately does not know. The database, the master key and the environment: a host key's
usable value is resolved by the builder (``relay.snapshot.build``) and handed in; how objects index
each other is the :class:`~relay.snapshot.build.Snapshot`'s business.

Invariants. Every value is immutable (frozen dataclasses, read-only mappings), so one snapshot can be
shared by every request without copying. ``from_row`` does no I/O and never mutates the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from relay.domain.batch_offload import NEVER, BatchOffload
from relay.domain.batch_policy import DEFAULT_BATCH_POLICY, BatchPolicy
from relay.domain.breaker import DEFAULT_TUNING, BreakerTuning
from relay.domain.cache_policy import CachePolicy
from relay.domain.grants import Grant, parse_grant
from relay.domain.guardrails import Guardrail
from relay.domain.ratelimits import RateLimitRule
from relay.pricing import NanoPrices, nano_prices

Row = Mapping[str, Any]

_NO_FALLBACKS: Mapping[str, tuple[str, ...]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Team:
    id: str
    name: str

    @classmethod
    def from_row(cls, row: Row) -> Team:
        return cls(row["id"], row["name"])


@dataclass(frozen=True, slots=True)
class Project:
    id: str
    name: str
    team_id: str
    default_policy_id: str | None
    enabled: bool

    @classmethod
    def from_row(cls, row: Row) -> Project:
        return cls(row["id"], row["name"], row["team_id"], row["default_policy_id"], row["enabled"])


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    id: str
    name: str
    project_id: str
    policy_id: str | None
    enabled: bool

    @classmethod
    def from_row(cls, row: Row) -> ServiceAccount:
        return cls(row["id"], row["name"], row["project_id"], row["policy_id"], row["enabled"])


@dataclass(frozen=True, slots=True)
class User:
    id: str
    name: str
    email: str
    enabled: bool
    token_version: int
    memberships: Mapping[str, str | None]  # project id -> membership policy id

    @classmethod
    def from_row(cls, row: Row, memberships: Mapping[str, str | None]) -> User:
        """``memberships``: the user's ``user_memberships`` rows as project id → policy id."""
        return cls(
            row["id"],
            row["name"],
            row["email"],
            row["enabled"],
            row["token_version"],
            MappingProxyType(dict(memberships)),
        )


@dataclass(frozen=True, slots=True)
class Host:
    id: str
    name: str
    base_url: str
    enabled: bool
    breaker: BreakerTuning = DEFAULT_TUNING  # SPEC §6 tuning; the key pool applies it on every failure

    @classmethod
    def from_row(cls, row: Row) -> Host:
        return cls(
            row["id"],
            row["name"],
            row["base_url"],
            row["enabled"],
            BreakerTuning.from_json(row.get("breaker")),
        )


@dataclass(frozen=True, slots=True)
class HostKey:
    id: str
    name: str
    host_id: str
    value: str | None  # None when it cannot be had (env var unset, undecryptable): never selected
    enabled: bool
    version: str  # changes whenever the key is edited: an edit re-arms an auth-failed breaker

    @classmethod
    def from_row(cls, row: Row, value: str | None) -> HostKey:
        """``value``: the key in clear, as the builder opened or read it (None when it could not)."""
        return cls(row["id"], row["name"], row["host_id"], value, row["enabled"], str(row["updated_at"]))


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    name: str
    provider: str
    aliases: tuple[str, ...]
    enabled: bool

    @classmethod
    def from_row(cls, row: Row, aliases: tuple[str, ...]) -> Model:
        """``aliases``: the model's ``model_aliases`` in their written order."""
        return cls(row["id"], row["name"], row["provider"], aliases, row["enabled"])


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
    # SPEC §22: whether a batch routed wholly here runs on the provider's batch API (default: never).
    offload: BatchOffload = NEVER

    @classmethod
    def from_row(cls, row: Row) -> Binding:
        pricing = row["pricing"]
        return cls(
            row["id"],
            row["name"],
            row["model_id"],
            row["host_id"],
            row["adapter"],
            row["upstream_name"],
            MappingProxyType(dict(pricing)) if pricing else None,
            row["enabled"],
            nano_prices(pricing),
            BatchOffload.from_json(row.get("batch_offload")),
        )

    @property
    def unpriced(self) -> bool:
        """No usable price: neither integer prices nor numeric ``input`` and ``output`` per million."""
        pricing = self.pricing
        return self.prices is None and (
            pricing is None or not all(isinstance(pricing.get(k), int | float) for k in ("input", "output"))
        )


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
    # SPEC §17: how the policy's batch items meet its limits (absent = §10.4's defaults).
    batch: BatchPolicy = DEFAULT_BATCH_POLICY
    # SPEC §19: the response cache (None: off — the hot path's one check).
    cache: CachePolicy | None = None
    # SPEC §20: the policy's guardrails of each stage, in order (empty: the hot path's one check).
    input_guardrails: tuple[Guardrail, ...] = ()
    output_guardrails: tuple[Guardrail, ...] = ()

    @classmethod
    def from_row(
        cls,
        row: Row,
        host_key_ids: tuple[str, ...],
        model_ids: Mapping[str, str],
        guardrails: tuple[Guardrail, ...] = (),
    ) -> Policy:
        """``host_key_ids``: the policy's pool (``policy_host_keys``) in order; ``model_ids``: model
        name or alias → model id, to key ``fallbacks`` by id (a key naming no model is left out)."""
        written: Mapping[str, list[str]] | None = row.get("fallbacks")
        fallbacks = (
            MappingProxyType({model_ids[k]: tuple(v) for k, v in written.items() if k in model_ids})
            if written
            else _NO_FALLBACKS
        )
        return cls(
            row["id"],
            row["name"],
            tuple(parse_grant(g) for g in row["models"]),
            host_key_ids,
            row["key_selection"],
            tuple(RateLimitRule.model_validate(x) for x in row["rate_limit"].get("rules", [])),
            row["payload_logging"],
            row["enabled"],
            fallbacks,
            BatchPolicy.model_validate(batch) if (batch := row.get("batch")) else DEFAULT_BATCH_POLICY,
            CachePolicy.model_validate(cache) if (cache := row.get("cache")) else None,
            tuple(g for g in guardrails if g.stage == "input"),
            tuple(g for g in guardrails if g.stage == "output"),
        )


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

    @classmethod
    def from_row(cls, row: Row) -> RelayKey:
        return cls(**{f: row[f] for f in cls.__slots__})
