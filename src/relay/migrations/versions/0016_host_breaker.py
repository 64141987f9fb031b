"""A host's breaker tuning: ``hosts.breaker``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05

``hosts.breaker`` is a JSON object ``{"threshold": n, "window_s": s, "max_open_s": s}`` as the control
plane validated it (``HostSpec.breaker``); NULL (every host written before this revision, and every
host that gives no ``breaker``) is the untuned breaker: the first 5xx or connection error opens a key,
for 1, 2, 4 … 60 s.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of tables.JSONType: jsonb on Postgres, JSON text on SQLite.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.add_column(sa.Column("breaker", JSON_TYPE, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts") as batch:
        batch.drop_column("breaker")
