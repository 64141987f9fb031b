"""Fair share across projects: when a claim last served each project.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-05

``batch_project_turns`` holds one row per project whose batch items were ever claimed: the time of its
latest claim. The claim serves the project whose turn is oldest (never-served projects first), so
projects take turns whatever number of batches each has open. A project's turn outlives its batches: a
project whose batch just finished and that submits a new one waits behind the projects served before
it. Rows are tiny (one per project) and nothing else refers to them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "batch_project_turns",
        sa.Column("project_id", sa.String(length=40), nullable=False),
        sa.Column("last_claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project_id", name=op.f("pk_batch_project_turns")),
    )


def downgrade() -> None:
    op.drop_table("batch_project_turns")
