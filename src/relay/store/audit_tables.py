"""The audit log's table (SPEC §21): ``audit_entries``, one row per recorded control-plane change.
Part of ``relay.store.tables``' metadata (the Alembic target).

Invariants the schema keeps. ``seq`` is the chain's order (1, 2, 3 … assigned under the chain lock by
``store.audit``, so it is also the order of the hashes); ``id`` is what the API shows. ``before`` and
``after`` are stored as the JSON text that was hashed, never re-encoded by the database (jsonb would
reorder keys and respell numbers; the hash is recomputed from what was written). Nothing updates or
deletes a row: retention does not know this table.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, String, Table, Text

from relay.store.columns import ID, _ts, metadata

audit_entries = Table(
    "audit_entries",
    metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("id", ID, nullable=False, unique=True),
    _ts("at"),
    Column("actor_kind", String(20), nullable=False),
    Column("actor_id", String(64), nullable=True),
    Column("actor_email", String(320), nullable=True),
    Column("action", String(20), nullable=False),
    Column("kind", String(40), nullable=False),
    Column("ref", String(320), nullable=False),
    Column("before", Text, nullable=True),
    Column("after", Text, nullable=True),
    Column("ip", String(64), nullable=True),
    Column("user_agent", String(512), nullable=True),
    Column("request_id", String(64), nullable=True),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Index("ix_audit_entries_at", "at"),
)
