"""Guardrails: the ``Guardrail`` catalog kind, a policy's ordered list of them, ``usage_events.guardrails``.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06

Frozen copy of ``guardrails`` and ``policy_guardrails`` in ``relay/store/tables.py``. A policy's list
entries are parts of the policy (CASCADE); a guardrail a policy names cannot be deleted (RESTRICT).
Existing policies have no guardrails; existing usage events list none (NULL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=False)


def _str(name: str, length: int, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=length), nullable=nullable)


def _fk(table: str, column: str, parent: str, ondelete: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{parent}.id"], name=op.f(f"fk_{table}_{column}_{parent}"), ondelete=ondelete
    )


def upgrade() -> None:
    with op.batch_alter_table("usage_events") as batch:
        batch.add_column(sa.Column("guardrails", JSON_TYPE, nullable=True))
    op.create_table(
        "guardrails",
        _str("id", 40),
        _str("name", 63),
        _ts("created_at"),
        _ts("updated_at"),
        _str("stage", 16),
        _str("action", 16),
        sa.Column("regex", JSON_TYPE, nullable=True),
        sa.Column("pii", JSON_TYPE, nullable=True),
        sa.Column("webhook", JSON_TYPE, nullable=True),
        sa.Column("message", sa.String(length=500), server_default="", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_guardrails")),
        sa.UniqueConstraint("name", name=op.f("uq_guardrails_name")),
        sa.CheckConstraint("stage IN ('input', 'output')", name=op.f("ck_guardrails_stage")),
        sa.CheckConstraint("action IN ('block', 'redact')", name=op.f("ck_guardrails_action")),
    )
    op.create_table(
        "policy_guardrails",
        _str("policy_id", 40),
        _str("guardrail_id", 40),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("policy_id", "guardrail_id", name=op.f("pk_policy_guardrails")),
        _fk("policy_guardrails", "policy_id", "policies", "CASCADE"),
        _fk("policy_guardrails", "guardrail_id", "guardrails", "RESTRICT"),
    )
    op.create_index(op.f("ix_policy_guardrails_policy_id"), "policy_guardrails", ["policy_id"], unique=False)
    op.create_index(
        op.f("ix_policy_guardrails_guardrail_id"), "policy_guardrails", ["guardrail_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_policy_guardrails_guardrail_id"), table_name="policy_guardrails")
    op.drop_index(op.f("ix_policy_guardrails_policy_id"), table_name="policy_guardrails")
    op.drop_table("policy_guardrails")
    op.drop_table("guardrails")
    with op.batch_alter_table("usage_events") as batch:
        batch.drop_column("guardrails")
