"""A batch's final-state counts: ``batch_counters``, filled in for every existing batch.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

``batch_counters`` holds one row per batch with at least one final item: how many of its items are
``completed``, ``discarded`` and ``cancelled``. Every transaction that makes items final bumps it in
the same transaction, so a batch's progress is read from one row instead of counting its items (a
million-item batch's GROUP BY took seconds). The upgrade counts the final items of every batch that
exists, in one ``INSERT … SELECT`` over ``batch_items``; the downgrade drops the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "batch_counters",
        sa.Column("batch_id", sa.String(length=40), nullable=False),
        sa.Column("completed", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("discarded", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cancelled", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint(
            "completed >= 0 AND discarded >= 0 AND cancelled >= 0",
            name=op.f("ck_batch_counters_not_negative"),
        ),
        sa.ForeignKeyConstraint(
            ["batch_id"], ["batches.id"], name=op.f("fk_batch_counters_batch_id_batches"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("batch_id", name=op.f("pk_batch_counters")),
    )
    op.execute(
        "INSERT INTO batch_counters (batch_id, completed, discarded, cancelled)"
        " SELECT batch_id,"
        " SUM(CASE WHEN state = 'completed' THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN state = 'discarded' THEN 1 ELSE 0 END),"
        " SUM(CASE WHEN state = 'cancelled' THEN 1 ELSE 0 END)"
        " FROM batch_items WHERE state IN ('completed', 'discarded', 'cancelled')"
        " GROUP BY batch_id"
    )


def downgrade() -> None:
    op.drop_table("batch_counters")
