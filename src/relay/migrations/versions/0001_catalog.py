"""The catalog's tables, plus settings and the single catalog_revision row.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Frozen copy of ``relay/store/tables.py`` as of this revision: every constraint and index carries the
name the metadata's naming convention gives it (``op.f`` marks a name as final), so later revisions
can drop or alter them by name on both SQLite and Postgres. Tables are created parents first.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of tables.JSONType: jsonb on Postgres, JSON text on SQLite.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

TABLES = (
    "teams",
    "policies",
    "projects",
    "service_accounts",
    "users",
    "user_memberships",
    "hosts",
    "host_keys",
    "models",
    "model_aliases",
    "bindings",
    "policy_host_keys",
    "relay_keys",
    "settings",
    "catalog_revision",
)


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _id(name: str, nullable: bool) -> sa.Column:
    return sa.Column(name, sa.String(length=40), nullable=nullable)


def _object(table: str) -> list[sa.Column | sa.Constraint]:
    """The columns every catalog object has (id, unique name, timestamps) with their constraints."""
    return [
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}")),
        sa.UniqueConstraint("name", name=op.f(f"uq_{table}_name")),
    ]


def _fk(table: str, column: str, parent: str, ondelete: str = "RESTRICT") -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{parent}.id"], name=op.f(f"fk_{table}_{column}_{parent}"), ondelete=ondelete
    )


def _index(table: str, *columns: str) -> None:
    for column in columns:
        op.create_index(op.f(f"ix_{table}_{column}"), table, [column], unique=False)


def _enabled() -> sa.Column:
    return sa.Column("enabled", sa.Boolean(), server_default="1", nullable=False)


def upgrade() -> None:
    op.create_table(
        "teams",
        *_object("teams"),
        sa.Column("display_name", sa.String(length=200), server_default="", nullable=False),
    )
    op.create_table(
        "policies",
        *_object("policies"),
        sa.Column("models", JSON_TYPE, nullable=False),
        sa.Column("key_selection", sa.String(length=32), server_default="prioritized", nullable=False),
        sa.Column("rate_limit", JSON_TYPE, nullable=False),
        sa.Column("payload_logging", sa.Boolean(), server_default="0", nullable=False),
        _enabled(),
        sa.CheckConstraint(
            "key_selection IN ('prioritized', 'round_robin', 'least_recently_used')",
            name=op.f("ck_policies_key_selection"),
        ),
    )
    op.create_table(
        "projects",
        *_object("projects"),
        _id("team_id", nullable=False),
        _id("default_policy_id", nullable=True),
        _enabled(),
        _fk("projects", "team_id", "teams"),
        _fk("projects", "default_policy_id", "policies"),
    )
    _index("projects", "team_id", "default_policy_id")
    op.create_table(
        "service_accounts",
        *_object("service_accounts"),
        _id("project_id", nullable=False),
        _id("policy_id", nullable=True),
        _enabled(),
        _fk("service_accounts", "project_id", "projects"),
        _fk("service_accounts", "policy_id", "policies"),
    )
    _index("service_accounts", "project_id", "policy_id")
    op.create_table(
        "users",
        *_object("users"),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        _enabled(),
        sa.Column("token_version", sa.Integer(), server_default="1", nullable=False),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
    )
    op.create_table(
        "user_memberships",
        _id("user_id", nullable=False),
        _id("project_id", nullable=False),
        _id("policy_id", nullable=True),
        sa.Column("position", sa.Integer(), nullable=False),
        _fk("user_memberships", "user_id", "users", ondelete="CASCADE"),
        _fk("user_memberships", "project_id", "projects"),
        _fk("user_memberships", "policy_id", "policies"),
        sa.PrimaryKeyConstraint("user_id", "project_id", name=op.f("pk_user_memberships")),
    )
    _index("user_memberships", "user_id", "project_id", "policy_id")
    op.create_table(
        "hosts",
        *_object("hosts"),
        sa.Column("base_url", sa.String(length=2048), nullable=False),
        _enabled(),
    )
    op.create_table(
        "host_keys",
        *_object("host_keys"),
        _id("host_id", nullable=False),
        sa.Column("value_encrypted", sa.LargeBinary(), nullable=True),
        sa.Column("value_from_env", sa.String(length=255), nullable=True),
        _enabled(),
        _fk("host_keys", "host_id", "hosts"),
        sa.CheckConstraint(
            "(value_encrypted IS NULL) <> (value_from_env IS NULL)",
            name=op.f("ck_host_keys_exactly_one_value_source"),
        ),
    )
    _index("host_keys", "host_id")
    op.create_table(
        "models",
        *_object("models"),
        sa.Column("provider", sa.String(length=63), nullable=False),
        _enabled(),
    )
    op.create_table(
        "model_aliases",
        sa.Column("alias", sa.String(length=200), nullable=False),
        _id("model_id", nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("alias", name=op.f("pk_model_aliases")),
        _fk("model_aliases", "model_id", "models", ondelete="CASCADE"),
    )
    _index("model_aliases", "model_id")
    op.create_table(
        "bindings",
        *_object("bindings"),
        _id("model_id", nullable=False),
        _id("host_id", nullable=False),
        sa.Column("adapter", sa.String(length=32), nullable=False),
        sa.Column("upstream_name", sa.String(length=200), nullable=True),
        sa.Column("pricing", JSON_TYPE, nullable=True),
        _enabled(),
        _fk("bindings", "model_id", "models"),
        _fk("bindings", "host_id", "hosts"),
        sa.CheckConstraint(
            "adapter IN ('openai', 'anthropic', 'openai_responses')", name=op.f("ck_bindings_adapter")
        ),
    )
    _index("bindings", "model_id", "host_id")
    op.create_table(
        "policy_host_keys",
        _id("policy_id", nullable=False),
        _id("host_key_id", nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        _fk("policy_host_keys", "policy_id", "policies", ondelete="CASCADE"),
        _fk("policy_host_keys", "host_key_id", "host_keys"),
        sa.PrimaryKeyConstraint("policy_id", "host_key_id", name=op.f("pk_policy_host_keys")),
    )
    _index("policy_host_keys", "policy_id", "host_key_id")
    op.create_table(
        "relay_keys",
        *_object("relay_keys"),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("principal_kind", sa.String(length=16), nullable=False),
        _id("service_account_id", nullable=True),
        _id("user_id", nullable=True),
        _id("project_id", nullable=True),
        _id("policy_id", nullable=True),
        _enabled(),
        _ts("expires_at", nullable=True),
        _ts("revoked_at", nullable=True),
        sa.Column("previous_key_hash", sa.String(length=64), nullable=True),
        _ts("grace_until", nullable=True),
        sa.Column("payload_logging", sa.Boolean(), server_default="0", nullable=False),
        sa.UniqueConstraint("key_hash", name=op.f("uq_relay_keys_key_hash")),
        _fk("relay_keys", "service_account_id", "service_accounts"),
        _fk("relay_keys", "user_id", "users"),
        _fk("relay_keys", "project_id", "projects"),
        _fk("relay_keys", "policy_id", "policies"),
        sa.CheckConstraint(
            "principal_kind IN ('serviceaccount', 'user')", name=op.f("ck_relay_keys_principal_kind")
        ),
        sa.CheckConstraint(
            "(principal_kind = 'serviceaccount' AND service_account_id IS NOT NULL AND user_id IS NULL)"
            " OR (principal_kind = 'user' AND user_id IS NOT NULL AND service_account_id IS NULL)",
            name=op.f("ck_relay_keys_principal_matches_kind"),
        ),
    )
    _index("relay_keys", "service_account_id", "user_id", "project_id", "policy_id", "previous_key_hash")
    op.create_table(
        "settings",
        sa.Column("key", sa.String(length=100), nullable=False),
        sa.Column("value", JSON_TYPE, nullable=False),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_settings")),
    )
    catalog_revision = op.create_table(
        "catalog_revision",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        _ts("updated_at"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_revision")),
        sa.CheckConstraint("id = 1", name=op.f("ck_catalog_revision_single_row")),
    )
    op.bulk_insert(catalog_revision, [{"id": 1, "revision": 0, "updated_at": datetime.now(UTC)}])


def downgrade() -> None:
    # Children first; a table's indexes go with it.
    for table in reversed(TABLES):
        op.drop_table(table)
