"""Batch items record where their response body is (file, offset, length in the payload directory).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

Completed items' bodies are appended to one file per process and batch instead of one file per item
(``relay.payloads.directory``); the item row says where its body is. Items completed before this
revision keep NULLs and are read from their per-item file. The CHECK keeps a reference whole and on
completed items only. SQLite cannot add a CHECK to an existing table, so there Alembic's batch mode
copies the table (the partial indexes are recreated with it).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK_NAME = "responses_are_whole_and_completed"
CHECK = (
    "(response_file IS NULL AND response_offset IS NULL AND response_length IS NULL)"
    " OR (state = 'completed' AND response_file IS NOT NULL AND response_offset IS NOT NULL"
    " AND response_length IS NOT NULL AND response_offset >= 0 AND response_length >= 0)"
)


def upgrade() -> None:
    with op.batch_alter_table("batch_items") as batch:
        batch.add_column(sa.Column("response_file", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("response_offset", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("response_length", sa.Integer(), nullable=True))
        batch.create_check_constraint(op.f(f"ck_batch_items_{CHECK_NAME}"), sa.text(CHECK))


def downgrade() -> None:
    with op.batch_alter_table("batch_items") as batch:
        batch.drop_constraint(op.f(f"ck_batch_items_{CHECK_NAME}"), type_="check")
        batch.drop_column("response_length")
        batch.drop_column("response_offset")
        batch.drop_column("response_file")
