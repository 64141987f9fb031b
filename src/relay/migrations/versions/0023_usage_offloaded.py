"""Provider batch offload's ledger: ``usage_events.offloaded`` and ``batches.offload_key_id``.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06

``usage_events.offloaded`` is true for a batch item a provider's own batch API ran (SPEC §22: priced at
the binding's ``discount``); every event written before this revision was run by Relay, so the column
defaults to false and existing rows read false. ``batches.offload_key_id`` is the host key an
offloaded batch was sent with: the provider's batch belongs to that key's account, so every poll,
cancel and result read uses the same key. NULL on every batch that was never offloaded.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("usage_events") as batch:
        batch.add_column(sa.Column("offloaded", sa.Boolean(), nullable=False, server_default="0"))
    with op.batch_alter_table("batches") as batch:
        batch.add_column(sa.Column("offload_key_id", sa.String(40), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("batches") as batch:
        batch.drop_column("offload_key_id")
    with op.batch_alter_table("usage_events") as batch:
        batch.drop_column("offloaded")
