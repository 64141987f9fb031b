"""The Files API's ``files`` table: uploads and the output files Relay writes.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

One row per file: uploads (purpose ``batch``) and the output and error files Relay writes
(``batch_output``). The bytes live in the payload store the row names (``payload_chunks`` kind ``file``
for ``database``, a file under the payload directory for ``files``); ``status`` is ``uploading`` until
they are whole. Downgrading drops the table and the ``file`` chunks (the files are gone).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EXPIRING = "expires_at IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("owner", sa.String(length=80), nullable=False),
        sa.Column("purpose", sa.String(length=16), nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("payload_store", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("purpose IN ('batch', 'batch_output')", name=op.f("ck_files_purpose")),
        sa.CheckConstraint("status IN ('uploading', 'processed')", name=op.f("ck_files_status")),
        sa.CheckConstraint("payload_store IN ('files', 'database')", name=op.f("ck_files_payload_store")),
        sa.CheckConstraint("bytes >= 0", name=op.f("ck_files_bytes_not_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index("ix_files_owner", "files", ["owner", "id"])
    op.create_index(
        "ix_files_expires_at",
        "files",
        ["expires_at"],
        sqlite_where=sa.text(EXPIRING),
        postgresql_where=sa.text(EXPIRING),
    )


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM payload_chunks WHERE kind = 'file'"))
    op.drop_index("ix_files_expires_at", table_name="files")
    op.drop_index("ix_files_owner", table_name="files")
    op.drop_table("files")
