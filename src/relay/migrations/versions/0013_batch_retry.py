"""Batch retry: a retry batch names its original, each of its items its idx there.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

* ``batches.retry_of``: the id of the batch a retry batch was made from (NULL for every other batch).
  No foreign key: the original may be deleted (retention) while its retry stays readable, still
  naming where it came from.
* ``batch_items.source_idx``: a retry item's idx in the original (its results carry it); NULL for
  every other item.

``batch_items.custom_id`` (§14/§15, revision 0008) already holds what a retried façade item's results
carry, so nothing else is added.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("retry_of", sa.String(length=40), nullable=True))
    with op.batch_alter_table("batch_items") as batch:
        batch.add_column(sa.Column("source_idx", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batch_items") as batch:
        batch.drop_column("source_idx")
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("retry_of")
