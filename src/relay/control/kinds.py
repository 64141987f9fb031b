"""The catalog kinds of SPEC §2 as data: how each one's spec maps onto its table and child tables.

Every kind shares one life cycle (``control.services.catalog``); what differs is described here: which fields
are references (and to which table), which are JSON, which child rows it owns, which fields are
secrets that are transformed on the way in and never rendered. Adding a kind means adding an entry,
not another copy of CRUD code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Table, null

from relay.domain import kind_specs as spec
from relay.domain.batch_policy import BatchPolicy
from relay.domain.guardrail_spec import GuardrailSpec
from relay.store import tables as t


@dataclass(frozen=True)
class RefField:
    """A spec field holding a reference (name or id) stored as a foreign-key column."""

    field: str
    column: str
    target: Table
    target_kind: str


@dataclass(frozen=True)
class ChildList:
    """A list-valued spec field stored as ordered child rows of the object.

    ``value_column`` holds a plain value (aliases) or, when ``target`` is set, a resolved reference
    (pool host keys). ``ref_fields`` is used for lists of objects (memberships)."""

    field: str
    table: Table
    parent_column: str
    value_column: str | None = None
    target: Table | None = None
    target_kind: str | None = None
    ref_fields: tuple[RefField, ...] = ()


@dataclass(frozen=True)
class Kind:
    name: str  # "ServiceAccount", as in relay apply documents
    plural: str  # "service-accounts", as in /api/<plural>
    id_prefix: str
    table: Table
    spec: type[BaseModel]
    plain: tuple[str, ...] = ()  # copied to same-named columns
    json: tuple[str, ...] = ()  # pydantic sub-models stored as JSON columns
    refs: tuple[RefField, ...] = ()
    children: tuple[ChildList, ...] = ()
    read_only: tuple[str, ...] = ()  # columns rendered but never written by callers
    write_only: tuple[str, ...] = field(default=())  # spec fields never rendered
    # Mutually exclusive fields: a patch that sets one drops the other from the current object.
    alternatives: tuple[str, ...] = ()


TEAM = Kind("Team", "teams", "tm", t.teams, spec.TeamSpec, plain=("display_name",))

PROJECT = Kind(
    "Project",
    "projects",
    "prj",
    t.projects,
    spec.ProjectSpec,
    plain=("enabled",),
    refs=(
        RefField("team", "team_id", t.teams, "Team"),
        RefField("default_policy", "default_policy_id", t.policies, "Policy"),
    ),
)

SERVICE_ACCOUNT = Kind(
    "ServiceAccount",
    "service-accounts",
    "sa",
    t.service_accounts,
    spec.ServiceAccountSpec,
    plain=("enabled",),
    refs=(
        RefField("project", "project_id", t.projects, "Project"),
        RefField("policy", "policy_id", t.policies, "Policy"),
    ),
)

USER = Kind(
    "User",
    "users",
    "usr",
    t.users,
    spec.UserSpec,
    plain=("email", "enabled"),
    children=(
        ChildList(
            "memberships",
            t.user_memberships,
            "user_id",
            ref_fields=(
                RefField("project", "project_id", t.projects, "Project"),
                RefField("policy", "policy_id", t.policies, "Policy"),
            ),
        ),
    ),
    read_only=("token_version",),
    write_only=("password",),
)

HOST = Kind("Host", "hosts", "hst", t.hosts, spec.HostSpec, plain=("base_url", "enabled"), json=("breaker",))

HOST_KEY = Kind(
    "HostKey",
    "host-keys",
    "hk",
    t.host_keys,
    spec.HostKeySpec,
    plain=("value_from_env", "enabled"),
    refs=(RefField("host", "host_id", t.hosts, "Host"),),
    write_only=("value",),
    alternatives=("value", "value_from_env"),
)

MODEL = Kind(
    "Model",
    "models",
    "mdl",
    t.models,
    spec.ModelSpec,
    plain=("provider", "enabled"),
    children=(ChildList("aliases", t.model_aliases, "model_id", value_column="alias"),),
)

BINDING = Kind(
    "Binding",
    "bindings",
    "bnd",
    t.bindings,
    spec.BindingSpec,
    plain=("adapter", "upstream_name", "enabled"),
    json=("pricing", "batch_offload"),
    refs=(
        RefField("model", "model_id", t.models, "Model"),
        RefField("host", "host_id", t.hosts, "Host"),
    ),
)

GUARDRAIL = Kind(
    "Guardrail",
    "guardrails",
    "gr",
    t.guardrails,
    GuardrailSpec,
    plain=("stage", "action", "regex", "pii", "message"),
    json=("webhook",),
)

POLICY = Kind(
    "Policy",
    "policies",
    "pol",
    t.policies,
    spec.PolicySpec,
    plain=("models", "key_selection", "payload_logging", "enabled"),
    json=("rate_limit", "fallbacks", "cache"),
    children=(
        ChildList(
            "host_keys",
            t.policy_host_keys,
            "policy_id",
            value_column="host_key_id",
            target=t.host_keys,
            target_kind="HostKey",
        ),
        ChildList(
            "guardrails",
            t.policy_guardrails,
            "policy_id",
            value_column="guardrail_id",
            target=t.guardrails,
            target_kind="Guardrail",
        ),
    ),
)

WEBHOOK = Kind(
    "Webhook",
    "webhooks",
    "wh",
    t.webhooks,
    spec.WebhookSpec,
    plain=("url", "events", "enabled"),
    refs=(RefField("project", "project_id", t.projects, "Project"),),
    write_only=("secret",),
)

# Apply order: every kind after the kinds it references (deletes run in reverse).
KINDS: tuple[Kind, ...] = (
    TEAM,
    HOST,
    HOST_KEY,
    MODEL,
    BINDING,
    GUARDRAIL,
    POLICY,
    PROJECT,
    SERVICE_ACCOUNT,
    USER,
    WEBHOOK,
)
BY_PLURAL = {k.plural: k for k in KINDS}
BY_NAME = {k.name: k for k in KINDS}


def stored_batch_block(block: Mapping[str, Any]) -> Any:
    """A policy's ``batch`` column (SPEC §17): SQL NULL for the defaults, so a policy that never
    chose one reads exactly as one written before the block existed; else the whole block."""
    return null() if BatchPolicy.model_validate(block).is_default else dict(block)


def shown_batch_block(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The block as the API shows it: every field, defaults filled (NULL → the defaults)."""
    return BatchPolicy.model_validate(stored or {}).model_dump()
