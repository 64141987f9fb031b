"""Model fallbacks: policies hold a ``fallbacks`` map, usage events record the
model that was asked for next to the one that answered.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

``policies.fallbacks`` is a JSON object ``{"<model>": ["<model>", …]}``; NULL (every policy written
before this revision) means no fallbacks. ``usage_events.requested_model`` is NULL on events written
before this revision; the usage API then shows ``model`` (no event before it could have fallen back).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("policies") as batch:
        batch.add_column(sa.Column("fallbacks", JSON_TYPE, nullable=True))
    with op.batch_alter_table("usage_events") as batch:
        batch.add_column(sa.Column("requested_model", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_events") as batch:
        batch.drop_column("requested_model")
    with op.batch_alter_table("policies") as batch:
        batch.drop_column("fallbacks")
