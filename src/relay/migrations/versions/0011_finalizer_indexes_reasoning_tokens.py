"""Indexes for the batch finalizer's poll and the idempotency-key sweep; reasoning tokens in usage events.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

``ix_batches_finalizing`` is partial: only the finished OpenAI batches waiting for their output files
(``finalizing``) or claimed for them (``fin@<deadline>``) enter it, so the poll every replica runs
costs the same however many ended batches accumulate. The predicate is frozen here; the store's table
definition and the poll's query spell the same one. ``ix_idempotency_keys_created_at`` serves the sweep
of answers past their window. ``usage_events.reasoning_tokens`` is NULL on every event written before
this revision (and whenever the upstream reports no such count).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FINALIZE_WAITING = (
    "api = 'openai' AND completed_at IS NOT NULL AND (api_status = 'finalizing' OR api_status LIKE 'fin@%')"
)


def upgrade() -> None:
    op.create_index(
        "ix_batches_finalizing",
        "batches",
        ["completed_at", "id"],
        sqlite_where=sa.text(FINALIZE_WAITING),
        postgresql_where=sa.text(FINALIZE_WAITING),
    )
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])
    with op.batch_alter_table("usage_events") as batch:
        batch.add_column(sa.Column("reasoning_tokens", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_events") as batch:
        batch.drop_column("reasoning_tokens")
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
    op.drop_index("ix_batches_finalizing", table_name="batches")
