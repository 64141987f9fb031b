"""Provider batch offload: ``bindings.batch_offload`` and the batch's offload columns.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06

``bindings.batch_offload`` is a JSON object ``{"mode", "min_items", "discount"}`` as the control plane
validated it (``relay.domain.batch_offload``); NULL (every binding written before this revision, and
every binding that gives no block) means never offload: Relay runs every item itself.

On ``batches``: ``offload_binding_id`` (the binding whose host runs the batch natively),
``offload_batch_id`` (the provider's id for it), ``offload_state`` (the provider's status as last
polled), ``offload_polled_at`` (when a replica last polled it) and ``offload_reason`` (why a batch that
qualified runs on Relay's workers after all). All NULL on every batch written before this revision:
gateway-run. ``ix_batches_offloaded`` is partial — only open offloaded batches enter it — so the
poll every replica runs costs the same however many batches accumulate; its predicate is frozen here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of tables.JSONType: jsonb on Postgres, JSON text on SQLite.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
OFFLOAD_OPEN = "completed_at IS NULL AND offload_state IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("bindings") as batch:
        batch.add_column(sa.Column("batch_offload", JSON_TYPE, nullable=True))
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("offload_binding_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("offload_batch_id", sa.String(200), nullable=True))
        batch.add_column(sa.Column("offload_state", sa.String(32), nullable=True))
        batch.add_column(sa.Column("offload_polled_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("offload_reason", sa.Text(), nullable=True))
    op.create_index(
        "ix_batches_offloaded",
        "batches",
        ["offload_polled_at", "id"],
        sqlite_where=sa.text(OFFLOAD_OPEN),
        postgresql_where=sa.text(OFFLOAD_OPEN),
    )


def downgrade() -> None:
    op.drop_index("ix_batches_offloaded", table_name="batches")
    with op.batch_alter_table("batches") as batch:
        for column in (
            "offload_reason",
            "offload_polled_at",
            "offload_state",
            "offload_batch_id",
            "offload_binding_id",
        ):
            batch.drop_column(column)
    with op.batch_alter_table("bindings") as batch:
        batch.drop_column("batch_offload")
