"""A batch's trace context: ``batches.trace_parent``.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06

``batches.trace_parent`` is the W3C ``traceparent`` of the server span that created the batch, stored
when tracing was on and that span was sampled; each item's ``batch.item`` span links to it. NULL
(every batch written before this revision, and every batch created untraced or unsampled): its items
are not traced.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("trace_parent", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("trace_parent")
