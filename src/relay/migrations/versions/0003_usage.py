"""Usage events (live requests and batch items) and captured payloads.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Frozen copy of the ``usage_events`` and ``payloads`` tables of ``relay/store/tables.py``. No foreign
keys: events record ids and outlive the catalog objects they name. The partial unique index on
(batch_id, batch_idx) is what makes "exactly one usage event per batch item" a database invariant.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _str(name: str, length: int, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=length), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "usage_events",
        _str("id", 40),
        _ts("ts"),
        _str("request_id", 100),
        _str("source", 8),
        _str("batch_id", 40, nullable=True),
        sa.Column("batch_idx", sa.Integer(), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        _str("error_kind", 64, nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        _str("model", 200),
        _str("upstream_model", 200),
        _str("host", 63),
        _str("adapter", 32),
        _str("inbound_shape", 32),
        _str("host_key_id", 40, nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("streamed", sa.Boolean(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_nanos", sa.BigInteger(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("ttft_ms", sa.Integer(), nullable=True),
        _str("policy_id", 40),
        _str("project_id", 40),
        _str("team_id", 40),
        _str("principal_kind", 16),
        _str("principal_id", 40),
        _str("credential_kind", 8),
        _str("credential_id", 64),
        _str("relay_key_hash", 80, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_events")),
        sa.CheckConstraint("source IN ('live', 'batch')", name=op.f("ck_usage_events_source")),
        sa.CheckConstraint(
            "(source = 'batch') = (batch_id IS NOT NULL AND batch_idx IS NOT NULL)",
            name=op.f("ck_usage_events_batch_item"),
        ),
    )
    op.create_index(op.f("ix_usage_events_ts_id"), "usage_events", ["ts", "id"], unique=False)
    op.create_index(op.f("ix_usage_events_project_id_ts"), "usage_events", ["project_id", "ts"], unique=False)
    op.create_index(op.f("ix_usage_events_source_ts"), "usage_events", ["source", "ts"], unique=False)
    op.create_index(
        op.f("uq_usage_events_batch_item"),
        "usage_events",
        ["batch_id", "batch_idx"],
        unique=True,
        sqlite_where=sa.text("batch_id IS NOT NULL"),
        postgresql_where=sa.text("batch_id IS NOT NULL"),
    )
    op.create_table(
        "payloads",
        _str("request_id", 100),
        _ts("ts"),
        sa.Column("request_body", sa.LargeBinary(), nullable=False),
        sa.Column("response_body", sa.LargeBinary(), nullable=False),
        sa.Column("request_truncated", sa.Boolean(), nullable=False),
        sa.Column("response_truncated", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_payloads")),
    )
    op.create_index(op.f("ix_payloads_ts"), "payloads", ["ts"], unique=False)


def downgrade() -> None:
    # A table's indexes go with it.
    op.drop_table("payloads")
    op.drop_table("usage_events")
