"""The completion webhooks' tables (SPEC §10.10): the ``Webhook`` catalog kind, its outbox of events and
the record of every delivery attempt. Part of ``relay.store.tables``' metadata (the Alembic target).

Invariants the schema keeps. At most one event per webhook and batch (``ux_webhook_events_batch``), so
a batch that "finishes" twice cannot send twice; each attempt of an event is recorded once
(``ux_webhook_deliveries_attempt``); an event is ``pending`` exactly while it has a next attempt, and
final (``delivered``/``failed``) exactly when it has ``finished_at``. Deleting a webhook deletes its
events and their deliveries (CASCADE: they are parts of it); a webhook's project is a reference, so a
project with webhooks cannot be deleted (RESTRICT, 409).
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
)

from relay.store.columns import ID, JSONType, _common, _ref, _ts, _where, metadata

webhooks = Table(
    "webhooks",
    metadata,
    *_common(),
    _ref("project_id", "projects", nullable=True),  # NULL: batches of every project
    Column("url", String(2048), nullable=False),
    Column("secret_encrypted", LargeBinary, nullable=False),  # SecretBox, bound to the webhook id
    Column("events", JSONType, nullable=False),  # ["batch.completed", …]
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

# The outbox: one row per (webhook, finished batch), written in the transaction that finishes the
# batch. ``body`` is the exact JSON sent (and signed) on every attempt. While ``pending``,
# ``next_attempt_at`` is when it is due; a claim moves it one lease ahead and sets ``claim_token``, so
# an attempt whose replica died becomes due again when the lease runs out.
webhook_events = Table(
    "webhook_events",
    metadata,
    Column("id", ID, primary_key=True),
    Column("webhook_id", ID, ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False),
    Column("type", String(32), nullable=False),
    Column("batch_id", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),  # attempts recorded so far
    _ts("created_at"),
    _ts("next_attempt_at", nullable=True),
    Column("claimed_by", String(200), nullable=True),
    Column("claim_token", String(40), nullable=True),
    _ts("finished_at", nullable=True),
    CheckConstraint("state IN ('pending', 'delivered', 'failed')", name="state"),
    CheckConstraint("(state = 'pending') = (next_attempt_at IS NOT NULL)", name="pending_has_next_attempt"),
    CheckConstraint("(state = 'pending') = (finished_at IS NULL)", name="final_has_finished_at"),
    CheckConstraint("attempts >= 0", name="attempts_not_negative"),
    Index("ux_webhook_events_batch", "webhook_id", "batch_id", unique=True),
    # The deliverer's claim: due pending events, oldest due first. Final events never enter it.
    Index("ix_webhook_events_due", "next_attempt_at", **_where("state = 'pending'")),
)

# One row per attempt, written with the attempt's outcome (GET /api/webhooks/{ref}/deliveries).
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("id", ID, primary_key=True),
    Column("event_id", ID, ForeignKey("webhook_events.id", ondelete="CASCADE"), nullable=False),
    Column("webhook_id", ID, ForeignKey("webhooks.id", ondelete="CASCADE"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("status_code", Integer, nullable=True),  # NULL: timeout or connection error
    Column("latency_ms", Integer, nullable=False),
    Column("error", Text, nullable=True),
    _ts("created_at"),
    _ts("next_attempt_at", nullable=True),  # NULL: delivered, or failed for good
    CheckConstraint("attempt >= 1", name="attempt_positive"),
    Index("ux_webhook_deliveries_attempt", "event_id", "attempt", unique=True),
    Index("ix_webhook_deliveries_recent", "webhook_id", "created_at"),
)
