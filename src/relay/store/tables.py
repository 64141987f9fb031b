"""Every table Relay stores, in SQLAlchemy Core: the target the Alembic migrations must equal.

The catalog (SPEC §2) is normalised so that the database itself refuses dangling references:
foreign keys are ``ON DELETE RESTRICT`` wherever SPEC says "deleting an object that other catalog
objects reference is refused (409)", and ``CASCADE`` only for rows that are parts of their parent
(a policy's pool entries, a model's aliases, a user's memberships). Lists that belong to one object
and reference nothing (policy grants, rate-limit rules) are JSON.

Ids are strings minted by the services (``tm_…``, ``pol_…``); names are unique per kind.
Timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

ID = String(40)
NAME = String(63)
# jsonb on Postgres: comparable and indexable; plain JSON text on SQLite.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on both dialects (SQLite stores no offset and returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def _ts(name: str, nullable: bool = False) -> Column:
    return Column(name, UTCDateTime(), nullable=nullable)


def _common() -> list[Column]:
    """Columns every catalog object has (SPEC §2)."""
    return [
        Column("id", ID, primary_key=True),
        Column("name", NAME, nullable=False, unique=True),
        _ts("created_at"),
        _ts("updated_at"),
    ]


def _ref(column: str, table: str, *, nullable: bool, ondelete: str = "RESTRICT") -> Column:
    return Column(column, ID, ForeignKey(f"{table}.id", ondelete=ondelete), nullable=nullable, index=True)


teams = Table(
    "teams",
    metadata,
    *_common(),
    Column("display_name", String(200), nullable=False, server_default=""),
)

policies = Table(
    "policies",
    metadata,
    *_common(),
    Column("models", JSONType, nullable=False),
    Column("key_selection", String(32), nullable=False, server_default="prioritized"),
    Column("rate_limit", JSONType, nullable=False),
    Column("payload_logging", Boolean, nullable=False, server_default="0"),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    CheckConstraint(
        "key_selection IN ('prioritized', 'round_robin', 'least_recently_used')", name="key_selection"
    ),
)

projects = Table(
    "projects",
    metadata,
    *_common(),
    _ref("team_id", "teams", nullable=False),
    _ref("default_policy_id", "policies", nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

service_accounts = Table(
    "service_accounts",
    metadata,
    *_common(),
    _ref("project_id", "projects", nullable=False),
    _ref("policy_id", "policies", nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

users = Table(
    "users",
    metadata,
    *_common(),
    Column("email", String(320), nullable=False, unique=True),
    Column("password_hash", Text, nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    Column("token_version", Integer, nullable=False, server_default="1"),
)

user_memberships = Table(
    "user_memberships",
    metadata,
    _ref("user_id", "users", nullable=False, ondelete="CASCADE"),
    _ref("project_id", "projects", nullable=False),
    _ref("policy_id", "policies", nullable=True),
    Column("position", Integer, nullable=False),
    PrimaryKeyConstraint("user_id", "project_id"),
)

hosts = Table(
    "hosts",
    metadata,
    *_common(),
    Column("base_url", String(2048), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

host_keys = Table(
    "host_keys",
    metadata,
    *_common(),
    _ref("host_id", "hosts", nullable=False),
    Column("value_encrypted", LargeBinary, nullable=True),
    Column("value_from_env", String(255), nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    CheckConstraint("(value_encrypted IS NULL) <> (value_from_env IS NULL)", name="exactly_one_value_source"),
)

models = Table(
    "models",
    metadata,
    *_common(),
    Column("provider", String(63), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

model_aliases = Table(
    "model_aliases",
    metadata,
    Column("alias", String(200), primary_key=True),
    _ref("model_id", "models", nullable=False, ondelete="CASCADE"),
    Column("position", Integer, nullable=False),
)

bindings = Table(
    "bindings",
    metadata,
    *_common(),
    _ref("model_id", "models", nullable=False),
    _ref("host_id", "hosts", nullable=False),
    Column("adapter", String(32), nullable=False),
    Column("upstream_name", String(200), nullable=True),
    Column("pricing", JSONType, nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    CheckConstraint("adapter IN ('openai', 'anthropic', 'openai_responses')", name="adapter"),
)

policy_host_keys = Table(
    "policy_host_keys",
    metadata,
    _ref("policy_id", "policies", nullable=False, ondelete="CASCADE"),
    _ref("host_key_id", "host_keys", nullable=False),
    Column("position", Integer, nullable=False),
    PrimaryKeyConstraint("policy_id", "host_key_id"),
)

relay_keys = Table(
    "relay_keys",
    metadata,
    *_common(),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("principal_kind", String(16), nullable=False),
    _ref("service_account_id", "service_accounts", nullable=True),
    _ref("user_id", "users", nullable=True),
    _ref("project_id", "projects", nullable=True),
    _ref("policy_id", "policies", nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    _ts("expires_at", nullable=True),
    _ts("revoked_at", nullable=True),
    Column("previous_key_hash", String(64), nullable=True, index=True),
    _ts("grace_until", nullable=True),
    Column("payload_logging", Boolean, nullable=False, server_default="0"),
    CheckConstraint("principal_kind IN ('serviceaccount', 'user')", name="principal_kind"),
    CheckConstraint(
        "(principal_kind = 'serviceaccount' AND service_account_id IS NOT NULL AND user_id IS NULL)"
        " OR (principal_kind = 'user' AND user_id IS NOT NULL AND service_account_id IS NULL)",
        name="principal_matches_kind",
    ),
)

settings = Table(
    "settings",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", JSONType, nullable=False),
    _ts("updated_at"),
)

# Ed25519 keys that sign inference tokens (SPEC §3.2). The private half is sealed under the master key;
# every replica verifies with the public halves in its snapshot and signs with the newest active key.
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("id", ID, primary_key=True),
    Column("private_key_sealed", LargeBinary, nullable=False),
    Column("public_key", LargeBinary, nullable=False),
    Column("active", Boolean, nullable=False, server_default="1"),
    _ts("created_at"),
)

# Every minted inference token (never the token itself): revoking one needs its expiry, and the
# denylist is "revoked and not yet expired".
inference_tokens = Table(
    "inference_tokens",
    metadata,
    Column("jti", String(64), primary_key=True),
    _ref("user_id", "users", nullable=False, ondelete="CASCADE"),
    Column("project_id", ID, nullable=False),
    _ts("issued_at"),
    _ts("expires_at"),
    _ts("revoked_at", nullable=True),
)

# Login sessions for /api/auth/* (stored as sha256 of the opaque session value).
user_sessions = Table(
    "user_sessions",
    metadata,
    Column("session_hash", String(64), primary_key=True),
    _ref("user_id", "users", nullable=False, ondelete="CASCADE"),
    _ts("created_at"),
    _ts("expires_at"),
)

# One row (id = 1) whose revision every catalog write bumps in the same transaction. Replicas compare
# it with their snapshot's revision: the notice (LISTEN/NOTIFY) makes reloads fast, the revision makes
# them certain even when a notice was missed during a reconnect.
catalog_revision = Table(
    "catalog_revision",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", Integer, nullable=False),
    _ts("updated_at"),
    CheckConstraint("id = 1", name="single_row"),
)

CATALOG_TABLES = (
    teams,
    policies,
    projects,
    service_accounts,
    users,
    user_memberships,
    hosts,
    host_keys,
    models,
    model_aliases,
    bindings,
    policy_host_keys,
    relay_keys,
    settings,
)
