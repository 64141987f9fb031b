"""Payload store per batch, bodies in the database, and reservations that stay ``available``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

* ``batches.payload_store`` (SPEC §10.7): the store a batch's bodies were written to, ``files`` for
  every batch before this revision, so switching ``RELAY_BATCH_PAYLOAD_STORE`` keeps them readable.
* ``payload_chunks``: request and response bodies (later §14's files) of the ``database`` store, each
  body cut into chunks.
* Items a replica claims ahead of its workers stay ``available`` with ``claimed_by``/``claimed_at`` set
  (a reservation; SPEC §10.2: ``running`` means executing now). The CHECK that available items have no
  claimant becomes "claimant and claim time come together"; the partial index
  ``ix_batch_items_unreserved`` serves the claim, ``ix_batch_items_reserved`` the release of a gone
  replica's reservations. SQLite cannot change a CHECK in place: Alembic's batch mode copies the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_CHECK = (
    "available_items_have_no_claimant",
    "state <> 'available' OR (claimed_by IS NULL AND claimed_at IS NULL)",
)
NEW_CHECK = ("claims_are_whole", "(claimed_by IS NULL) = (claimed_at IS NULL)")
UNRESERVED = "state = 'available' AND claimed_by IS NULL"
RESERVED = "state = 'available' AND claimed_by IS NOT NULL"


def _partial_index(name: str, columns: list[str], where: str) -> None:
    op.create_index(
        name, "batch_items", columns, sqlite_where=sa.text(where), postgresql_where=sa.text(where)
    )


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(
            sa.Column(
                "payload_store", sa.String(length=16), nullable=False, server_default=sa.text("'files'")
            )
        )
        batch.create_check_constraint(
            op.f("ck_batches_payload_store"), sa.text("payload_store IN ('files', 'database')")
        )
    with op.batch_alter_table("batch_items") as batch:
        batch.drop_constraint(op.f(f"ck_batch_items_{OLD_CHECK[0]}"), type_="check")
        batch.create_check_constraint(op.f(f"ck_batch_items_{NEW_CHECK[0]}"), sa.text(NEW_CHECK[1]))
    _partial_index("ix_batch_items_unreserved", ["batch_id", "idx"], UNRESERVED)
    _partial_index("ix_batch_items_reserved", ["claimed_by"], RESERVED)
    op.create_table(
        "payload_chunks",
        sa.Column("owner_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.CheckConstraint("kind IN ('request', 'response', 'file')", name=op.f("ck_payload_chunks_kind")),
        sa.CheckConstraint("idx >= 0 AND seq >= 0", name=op.f("ck_payload_chunks_positions_not_negative")),
        sa.PrimaryKeyConstraint("owner_id", "kind", "idx", "seq", name=op.f("pk_payload_chunks")),
    )


def downgrade() -> None:
    op.drop_table("payload_chunks")
    op.drop_index("ix_batch_items_reserved", table_name="batch_items")
    op.drop_index("ix_batch_items_unreserved", table_name="batch_items")
    # Reservations are not a state the older schema knows: they go back to plain available items.
    op.execute(
        sa.text(
            "UPDATE batch_items SET claimed_by = NULL, claimed_at = NULL"
            " WHERE state = 'available' AND claimed_by IS NOT NULL"
        )
    )
    with op.batch_alter_table("batch_items") as batch:
        batch.drop_constraint(op.f(f"ck_batch_items_{NEW_CHECK[0]}"), type_="check")
        batch.create_check_constraint(op.f(f"ck_batch_items_{OLD_CHECK[0]}"), sa.text(OLD_CHECK[1]))
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint(op.f("ck_batches_payload_store"), type_="check")
        batch.drop_column("payload_store")
