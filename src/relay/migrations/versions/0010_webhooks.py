"""Completion webhooks: the ``Webhook`` catalog kind, its outbox of events, and delivery attempts.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

Frozen copy of ``relay/store/webhook_tables.py`` (SPEC §10.10). The outbox's invariants live in the
schema: one event per webhook and batch, one row per attempt, ``pending`` exactly while a next attempt
is due, a partial index that keeps the deliverer's claim on pending events only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _ts(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _str(name: str, length: int, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=length), nullable=nullable)


def _fk(table: str, column: str, parent: str, ondelete: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{parent}.id"], name=op.f(f"fk_{table}_{column}_{parent}"), ondelete=ondelete
    )


def upgrade() -> None:
    op.create_table(
        "webhooks",
        _str("id", 40),
        _str("name", 63),
        _ts("created_at"),
        _ts("updated_at"),
        _str("project_id", 40, nullable=True),
        _str("url", 2048),
        sa.Column("secret_encrypted", sa.LargeBinary(), nullable=False),
        sa.Column("events", JSON_TYPE, nullable=False),
        sa.Column("enabled", sa.Boolean(), server_default="1", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
        sa.UniqueConstraint("name", name=op.f("uq_webhooks_name")),
        _fk("webhooks", "project_id", "projects", "RESTRICT"),
    )
    op.create_index(op.f("ix_webhooks_project_id"), "webhooks", ["project_id"], unique=False)
    op.create_table(
        "webhook_events",
        _str("id", 40),
        _str("webhook_id", 40),
        _str("type", 32),
        _str("batch_id", 64),
        sa.Column("body", sa.Text(), nullable=False),
        _str("state", 16),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _ts("created_at"),
        _ts("next_attempt_at", nullable=True),
        _str("claimed_by", 200, nullable=True),
        _str("claim_token", 40, nullable=True),
        _ts("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_events")),
        _fk("webhook_events", "webhook_id", "webhooks", "CASCADE"),
        sa.CheckConstraint(
            "state IN ('pending', 'delivered', 'failed')", name=op.f("ck_webhook_events_state")
        ),
        sa.CheckConstraint(
            "(state = 'pending') = (next_attempt_at IS NOT NULL)",
            name=op.f("ck_webhook_events_pending_has_next_attempt"),
        ),
        sa.CheckConstraint(
            "(state = 'pending') = (finished_at IS NULL)",
            name=op.f("ck_webhook_events_final_has_finished_at"),
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_webhook_events_attempts_not_negative")),
    )
    op.create_index("ux_webhook_events_batch", "webhook_events", ["webhook_id", "batch_id"], unique=True)
    op.create_index(
        "ix_webhook_events_due",
        "webhook_events",
        ["next_attempt_at"],
        unique=False,
        sqlite_where=sa.text("state = 'pending'"),
        postgresql_where=sa.text("state = 'pending'"),
    )
    op.create_table(
        "webhook_deliveries",
        _str("id", 40),
        _str("event_id", 40),
        _str("webhook_id", 40),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _ts("created_at"),
        _ts("next_attempt_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        _fk("webhook_deliveries", "event_id", "webhook_events", "CASCADE"),
        _fk("webhook_deliveries", "webhook_id", "webhooks", "CASCADE"),
        sa.CheckConstraint("attempt >= 1", name=op.f("ck_webhook_deliveries_attempt_positive")),
    )
    op.create_index(
        "ux_webhook_deliveries_attempt", "webhook_deliveries", ["event_id", "attempt"], unique=True
    )
    op.create_index(
        "ix_webhook_deliveries_recent", "webhook_deliveries", ["webhook_id", "created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_events")
    op.drop_index(op.f("ix_webhooks_project_id"), table_name="webhooks")
    op.drop_table("webhooks")
