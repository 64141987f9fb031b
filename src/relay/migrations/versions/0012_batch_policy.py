"""The policy's batch block: ``policies.batch``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05

``policies.batch`` is a JSON object ``{"pacing", "live_reserve", "max_concurrency", "translate"}``
(``relay.domain.batch_policy.BatchPolicy``). NULL — every policy written before this revision, and
every policy whose block is the defaults — means the defaults: §10.4's rule (``pacing: "fail"``, no
live reserve, no concurrency cap, no translation). Storing NULL for the defaults keeps an untouched
catalog byte-for-byte what it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("policies") as batch:
        batch.add_column(sa.Column("batch", JSON_TYPE, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("policies") as batch:
        batch.drop_column("batch")
