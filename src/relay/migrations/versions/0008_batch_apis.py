"""One batch engine for three batch APIs: per-API columns, custom ids, idempotent creates.

SPEC §10.10, §14, §15.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

* ``batches.api`` (``relay`` for every batch before this revision), ``expires_at``,
  ``cancel_requested_at``, and the façade-owned ``api_status``/``api_data``. ``total_items = 0`` is
  allowed for the other APIs (an OpenAI batch that failed validation has no items);
  ``inbound_shape`` also admits ``openai_embeddings`` (§14's ``/v1/embeddings`` items).
* ``batch_items.custom_id``: the caller's name for an item (§14, §15).
* ``idempotency_keys``: the first answer per ``(owner, Idempotency-Key)``.
* Indexes: the owner's list (keyset newest first) and the expiry sweep.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
OLD_SHAPES = "inbound_shape IN ('openai', 'anthropic', 'openai_responses')"
NEW_SHAPES = "inbound_shape IN ('openai', 'anthropic', 'openai_responses', 'openai_embeddings')"
EXPIRING = "completed_at IS NULL AND expires_at IS NOT NULL"


def upgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.add_column(
            sa.Column("api", sa.String(length=16), nullable=False, server_default=sa.text("'relay'"))
        )
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("api_status", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("api_data", JSON_TYPE, nullable=True))
        batch.create_check_constraint(
            op.f("ck_batches_api"), sa.text("api IN ('relay', 'openai', 'anthropic')")
        )
        batch.drop_constraint(op.f("ck_batches_total_items_positive"), type_="check")
        batch.create_check_constraint(
            op.f("ck_batches_total_items_allowed"),
            sa.text("total_items > 0 OR (total_items = 0 AND api <> 'relay')"),
        )
        batch.drop_constraint(op.f("ck_batches_inbound_shape"), type_="check")
        batch.create_check_constraint(op.f("ck_batches_inbound_shape"), sa.text(NEW_SHAPES))
    op.execute(sa.text("UPDATE batches SET cancel_requested_at = completed_at WHERE status = 'cancelled'"))
    op.create_index("ix_batches_owner_created", "batches", ["owner", "created_at", "id"])
    op.create_index(
        "ix_batches_expiring",
        "batches",
        ["expires_at"],
        sqlite_where=sa.text(EXPIRING),
        postgresql_where=sa.text(EXPIRING),
    )
    with op.batch_alter_table("batch_items") as batch:
        batch.add_column(sa.Column("custom_id", sa.Text(), nullable=True))
    op.create_table(
        "idempotency_keys",
        sa.Column("owner", sa.String(length=80), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "key", name=op.f("pk_idempotency_keys")),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    with op.batch_alter_table("batch_items") as batch:
        batch.drop_column("custom_id")
    op.drop_index("ix_batches_expiring", table_name="batches")
    op.drop_index("ix_batches_owner_created", table_name="batches")
    # The older schema knows only §10 batches of the three shapes, each with items.
    op.execute(sa.text("DELETE FROM batches WHERE api <> 'relay' OR inbound_shape = 'openai_embeddings'"))
    with op.batch_alter_table("batches") as batch:
        batch.drop_constraint(op.f("ck_batches_inbound_shape"), type_="check")
        batch.create_check_constraint(op.f("ck_batches_inbound_shape"), sa.text(OLD_SHAPES))
        batch.drop_constraint(op.f("ck_batches_total_items_allowed"), type_="check")
        batch.create_check_constraint(op.f("ck_batches_total_items_positive"), sa.text("total_items > 0"))
        batch.drop_constraint(op.f("ck_batches_api"), type_="check")
        for column in ("api_data", "api_status", "cancel_requested_at", "expires_at", "api"):
            batch.drop_column(column)
