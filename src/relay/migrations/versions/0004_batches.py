"""Batches: the batch and item rows of the durable queue, and replica heartbeats.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

Frozen copy of the ``batches``, ``batch_items`` and ``batch_workers`` tables of ``relay/store/tables.py``.
The queue's invariants live here too (ARCHITECTURE rule 4): CHECKs that final states have
``finished_at``, running items a claimant, failed items an error; partial indexes that keep the claim
query on available items and the rescue query on running items, however many finished items a batch
has. No foreign keys to the catalog: a batch records ids that may outlive the objects they name.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of tables.JSONType: jsonb on Postgres, JSON text on SQLite.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _str(name: str, length: int, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=length), nullable=nullable)


def _partial_index(name: str, table: str, columns: list[str], where: str) -> None:
    op.create_index(
        op.f(name),
        table,
        columns,
        unique=False,
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
    )


def upgrade() -> None:
    op.create_table(
        "batches",
        _str("id", 40),
        _str("owner", 80),
        _str("key_hash", 64, nullable=True),
        sa.Column("token_claims", JSON_TYPE, nullable=True),
        _str("policy_id", 40),
        _str("policy_name", 63),
        _str("project_id", 40),
        _str("team_id", 40),
        _str("principal_kind", 16),
        _str("principal_id", 40),
        _str("credential_kind", 8),
        _str("credential_id", 64),
        _str("inbound_shape", 32),
        _str("status", 16),
        sa.Column("total_items", sa.Integer(), nullable=False),
        _ts("created_at"),
        _ts("completed_at", nullable=True),
        _ts("last_claimed_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_batches")),
        sa.CheckConstraint("status IN ('queued', 'cancelled')", name=op.f("ck_batches_status")),
        sa.CheckConstraint("total_items > 0", name=op.f("ck_batches_total_items_positive")),
        sa.CheckConstraint(
            "inbound_shape IN ('openai', 'anthropic', 'openai_responses')",
            name=op.f("ck_batches_inbound_shape"),
        ),
        sa.CheckConstraint(
            "principal_kind IN ('serviceaccount', 'user')", name=op.f("ck_batches_principal_kind")
        ),
        sa.CheckConstraint(
            "(credential_kind = 'key' AND key_hash IS NOT NULL AND token_claims IS NULL)"
            " OR (credential_kind = 'token' AND token_claims IS NOT NULL AND key_hash IS NULL)",
            name=op.f("ck_batches_credential_recorded"),
        ),
    )
    _partial_index("ix_batches_open", "batches", ["last_claimed_at", "created_at"], "completed_at IS NULL")
    op.create_table(
        "batch_items",
        _str("batch_id", 40),
        sa.Column("idx", sa.Integer(), nullable=False),
        _str("state", 16),
        _str("claimed_by", 200, nullable=True),
        _ts("claimed_at", nullable=True),
        _ts("finished_at", nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("batch_id", "idx", name=op.f("pk_batch_items")),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name=op.f("fk_batch_items_batch_id_batches"), ondelete="CASCADE"
        ),
        sa.CheckConstraint("idx >= 0", name=op.f("ck_batch_items_idx_not_negative")),
        sa.CheckConstraint(
            "state IN ('available', 'running', 'completed', 'discarded', 'cancelled')",
            name=op.f("ck_batch_items_state"),
        ),
        sa.CheckConstraint(
            "(state IN ('completed', 'discarded', 'cancelled')) = (finished_at IS NOT NULL)",
            name=op.f("ck_batch_items_final_states_have_finished_at"),
        ),
        sa.CheckConstraint(
            "state <> 'running' OR (claimed_by IS NOT NULL AND claimed_at IS NOT NULL)",
            name=op.f("ck_batch_items_running_items_have_a_claimant"),
        ),
        sa.CheckConstraint(
            "state <> 'available' OR (claimed_by IS NULL AND claimed_at IS NULL)",
            name=op.f("ck_batch_items_available_items_have_no_claimant"),
        ),
        sa.CheckConstraint(
            "(state IN ('discarded', 'cancelled')) = (error IS NOT NULL)",
            name=op.f("ck_batch_items_failed_items_have_an_error"),
        ),
    )
    _partial_index("ix_batch_items_available", "batch_items", ["batch_id", "idx"], "state = 'available'")
    _partial_index("ix_batch_items_running", "batch_items", ["batch_id", "claimed_by"], "state = 'running'")
    op.create_table(
        "batch_workers",
        _str("instance_id", 200),
        _ts("started_at"),
        _ts("heartbeat_at"),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_batch_workers")),
    )


def downgrade() -> None:
    # A table's indexes go with it; items before the batches they reference.
    op.drop_table("batch_workers")
    op.drop_table("batch_items")
    op.drop_table("batches")
