"""The response cache: ``policies.cache`` and ``usage_events.cache_hit``.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

``policies.cache`` is a JSON object ``{"ttl", "scope", "streams"}`` (``relay.domain.cache_policy``);
NULL — every policy written before this revision and every policy without a cache — means no cache.
``usage_events.cache_hit`` is true for a request answered from the cache; every event written before
this revision was not, so the column defaults to false and existing rows read false.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of tables.JSONType: jsonb on Postgres, JSON text on SQLite.
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("policies") as batch:
        batch.add_column(sa.Column("cache", JSON_TYPE, nullable=True))
    with op.batch_alter_table("usage_events") as batch:
        batch.add_column(sa.Column("cache_hit", sa.Boolean(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("usage_events") as batch:
        batch.drop_column("cache_hit")
    with op.batch_alter_table("policies") as batch:
        batch.drop_column("cache")
