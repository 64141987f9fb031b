"""Every table Relay stores, in SQLAlchemy Core: the target the Alembic migrations must equal.

The catalog (SPEC §2) is normalised so that the database itself refuses dangling references:
foreign keys are ``ON DELETE RESTRICT`` wherever SPEC says "deleting an object that other catalog
objects reference is refused (409)", and ``CASCADE`` only for rows that are parts of their parent
(a policy's pool entries, a model's aliases, a user's memberships). Lists that belong to one object
and reference nothing (policy grants, rate-limit rules) are JSON.

Ids are strings minted by the services (``tm_…``, ``pol_…``); names are unique per kind.
Timestamps are timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

ID = String(40)
NAME = String(63)
# jsonb on Postgres: comparable and indexable; plain JSON text on SQLite.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on both dialects (SQLite stores no offset and returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        # SQLite compares stored text: every value must be UTC, whatever zone the caller used.
        if value is not None and value.tzinfo is not None:
            return value.astimezone(UTC)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def _ts(name: str, nullable: bool = False) -> Column:
    return Column(name, UTCDateTime(), nullable=nullable)


def _where(predicate: str) -> dict[str, Any]:
    """A partial index's predicate on both dialects."""
    return {"sqlite_where": text(predicate), "postgresql_where": text(predicate)}


def _common() -> list[Column]:
    """Columns every catalog object has (SPEC §2)."""
    return [
        Column("id", ID, primary_key=True),
        Column("name", NAME, nullable=False, unique=True),
        _ts("created_at"),
        _ts("updated_at"),
    ]


def _ref(column: str, table: str, *, nullable: bool, ondelete: str = "RESTRICT") -> Column:
    return Column(column, ID, ForeignKey(f"{table}.id", ondelete=ondelete), nullable=nullable, index=True)


teams = Table(
    "teams",
    metadata,
    *_common(),
    Column("display_name", String(200), nullable=False, server_default=""),
)

policies = Table(
    "policies",
    metadata,
    *_common(),
    Column("models", JSONType, nullable=False),
    Column("key_selection", String(32), nullable=False, server_default="prioritized"),
    Column("rate_limit", JSONType, nullable=False),
    Column("fallbacks", JSONType, nullable=True),  # {"<model>": ["<model>", …]}; NULL: none (SPEC §4)
    Column("payload_logging", Boolean, nullable=False, server_default="0"),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    CheckConstraint(
        "key_selection IN ('prioritized', 'round_robin', 'least_recently_used')", name="key_selection"
    ),
)

projects = Table(
    "projects",
    metadata,
    *_common(),
    _ref("team_id", "teams", nullable=False),
    _ref("default_policy_id", "policies", nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

service_accounts = Table(
    "service_accounts",
    metadata,
    *_common(),
    _ref("project_id", "projects", nullable=False),
    _ref("policy_id", "policies", nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

users = Table(
    "users",
    metadata,
    *_common(),
    Column("email", String(320), nullable=False, unique=True),
    Column("password_hash", Text, nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    Column("token_version", Integer, nullable=False, server_default="1"),
)

user_memberships = Table(
    "user_memberships",
    metadata,
    _ref("user_id", "users", nullable=False, ondelete="CASCADE"),
    _ref("project_id", "projects", nullable=False),
    _ref("policy_id", "policies", nullable=True),
    Column("position", Integer, nullable=False),
    PrimaryKeyConstraint("user_id", "project_id"),
)

hosts = Table(
    "hosts",
    metadata,
    *_common(),
    Column("base_url", String(2048), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

host_keys = Table(
    "host_keys",
    metadata,
    *_common(),
    _ref("host_id", "hosts", nullable=False),
    Column("value_encrypted", LargeBinary, nullable=True),
    Column("value_from_env", String(255), nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    CheckConstraint("(value_encrypted IS NULL) <> (value_from_env IS NULL)", name="exactly_one_value_source"),
)

models = Table(
    "models",
    metadata,
    *_common(),
    Column("provider", String(63), nullable=False),
    Column("enabled", Boolean, nullable=False, server_default="1"),
)

model_aliases = Table(
    "model_aliases",
    metadata,
    Column("alias", String(200), primary_key=True),
    _ref("model_id", "models", nullable=False, ondelete="CASCADE"),
    Column("position", Integer, nullable=False),
)

bindings = Table(
    "bindings",
    metadata,
    *_common(),
    _ref("model_id", "models", nullable=False),
    _ref("host_id", "hosts", nullable=False),
    Column("adapter", String(32), nullable=False),
    Column("upstream_name", String(200), nullable=True),
    Column("pricing", JSONType, nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    CheckConstraint("adapter IN ('openai', 'anthropic', 'openai_responses')", name="adapter"),
)

policy_host_keys = Table(
    "policy_host_keys",
    metadata,
    _ref("policy_id", "policies", nullable=False, ondelete="CASCADE"),
    _ref("host_key_id", "host_keys", nullable=False),
    Column("position", Integer, nullable=False),
    PrimaryKeyConstraint("policy_id", "host_key_id"),
)

relay_keys = Table(
    "relay_keys",
    metadata,
    *_common(),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("prefix", String(16), nullable=False),
    Column("principal_kind", String(16), nullable=False),
    _ref("service_account_id", "service_accounts", nullable=True),
    _ref("user_id", "users", nullable=True),
    _ref("project_id", "projects", nullable=True),
    _ref("policy_id", "policies", nullable=True),
    Column("enabled", Boolean, nullable=False, server_default="1"),
    _ts("expires_at", nullable=True),
    _ts("revoked_at", nullable=True),
    Column("previous_key_hash", String(64), nullable=True, index=True),
    _ts("grace_until", nullable=True),
    Column("payload_logging", Boolean, nullable=False, server_default="0"),
    CheckConstraint("principal_kind IN ('serviceaccount', 'user')", name="principal_kind"),
    CheckConstraint(
        "(principal_kind = 'serviceaccount' AND service_account_id IS NOT NULL AND user_id IS NULL)"
        " OR (principal_kind = 'user' AND user_id IS NOT NULL AND service_account_id IS NULL)",
        name="principal_matches_kind",
    ),
)

settings = Table(
    "settings",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", JSONType, nullable=False),
    _ts("updated_at"),
)

# Ed25519 keys that sign inference tokens (SPEC §3.2). The private half is sealed under the master key;
# every replica verifies with the public halves in its snapshot and signs with the newest active key.
signing_keys = Table(
    "signing_keys",
    metadata,
    Column("id", ID, primary_key=True),
    Column("private_key_sealed", LargeBinary, nullable=False),
    Column("public_key", LargeBinary, nullable=False),
    Column("active", Boolean, nullable=False, server_default="1"),
    _ts("created_at"),
)

# Every minted inference token (never the token itself): revoking one needs its expiry, and the
# denylist is "revoked and not yet expired".
inference_tokens = Table(
    "inference_tokens",
    metadata,
    Column("jti", String(64), primary_key=True),
    _ref("user_id", "users", nullable=False, ondelete="CASCADE"),
    Column("project_id", ID, nullable=False),
    _ts("issued_at"),
    _ts("expires_at"),
    _ts("revoked_at", nullable=True),
)

# Login sessions for /api/auth/* (stored as sha256 of the opaque session value).
user_sessions = Table(
    "user_sessions",
    metadata,
    Column("session_hash", String(64), primary_key=True),
    _ref("user_id", "users", nullable=False, ondelete="CASCADE"),
    _ts("created_at"),
    _ts("expires_at"),
)

# One row per live request and per batch item (SPEC §8, §10.8). No foreign keys on purpose: events
# record ids, not references, and outlive the catalog objects they name (SPEC §2). SPEC-required strings
# are NOT NULL and '' when not known at the end of the request (routing failed before a model, host or
# adapter was chosen); SPEC-optional fields ("?") are NULL when absent.
usage_events = Table(
    "usage_events",
    metadata,
    Column("id", ID, primary_key=True),
    _ts("ts"),
    Column("request_id", String(100), nullable=False),
    Column("source", String(8), nullable=False),
    Column("batch_id", ID, nullable=True),
    Column("batch_idx", Integer, nullable=True),
    Column("status", Integer, nullable=False),  # upstream HTTP status; 0 = never reached
    Column("error_kind", String(64), nullable=True),
    Column("error_message", Text, nullable=True),
    Column("model", String(200), nullable=False),
    # the model asked for; differs from model only after a fallback (SPEC §4, §8); NULL before 0007
    Column("requested_model", String(200), nullable=True),
    Column("upstream_model", String(200), nullable=False),
    Column("host", String(63), nullable=False),
    Column("adapter", String(32), nullable=False),
    Column("inbound_shape", String(32), nullable=False),
    Column("host_key_id", ID, nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("streamed", Boolean, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cached_input_tokens", BigInteger, nullable=False),
    Column("cost_nanos", BigInteger, nullable=True),  # integer nano-USD; NULL: unpriced or nothing ran
    Column("latency_ms", Integer, nullable=False),
    Column("ttft_ms", Integer, nullable=True),
    Column("policy_id", ID, nullable=False),
    Column("project_id", ID, nullable=False),
    Column("team_id", ID, nullable=False),
    Column("principal_kind", String(16), nullable=False),
    Column("principal_id", ID, nullable=False),
    Column("credential_kind", String(8), nullable=False),
    Column("credential_id", String(64), nullable=False),
    Column("relay_key_hash", String(80), nullable=True),
    CheckConstraint("source IN ('live', 'batch')", name="source"),
    CheckConstraint(
        "(source = 'batch') = (batch_id IS NOT NULL AND batch_idx IS NOT NULL)", name="batch_item"
    ),
    # Newest-first keyset pagination reads this index backwards (ORDER BY ts DESC, id DESC); an
    # ascending index serves both directions on both dialects.
    Index("ix_usage_events_ts_id", "ts", "id"),
    Index("ix_usage_events_project_id_ts", "project_id", "ts"),
    Index("ix_usage_events_source_ts", "source", "ts"),
    # Exactly one event per batch item, enforced by the database (SPEC §13); also the batch_id index.
    Index(
        "uq_usage_events_batch_item", "batch_id", "batch_idx", unique=True, **_where("batch_id IS NOT NULL")
    ),
)

# Captured bodies of live requests (SPEC §9), keyed by the request id of their usage event and written
# in the same transaction as it. Batch items are never captured.
payloads = Table(
    "payloads",
    metadata,
    Column("request_id", String(100), primary_key=True),
    _ts("ts"),
    Column("request_body", LargeBinary, nullable=False),
    Column("response_body", LargeBinary, nullable=False),
    Column("request_truncated", Boolean, nullable=False),
    Column("response_truncated", Boolean, nullable=False),
    Index("ix_payloads_ts", "ts"),
)

# Batches (SPEC §10). A batch records the submitter's attribution as ids and values, not references:
# deleting the policy, key or project a batch recorded is allowed (its remaining items then fail when
# they run, naming the policy by ``policy_name``), so there are no foreign keys to the catalog.
# ``completed_at`` is set in the transaction that leaves no item available or running.
batches = Table(
    "batches",
    metadata,
    Column("id", ID, primary_key=True),
    Column("owner", String(80), nullable=False),  # the key's sha256, or "user:<id>" for tokens (§10.8)
    Column("key_hash", String(64), nullable=True),  # relay keys: the hash presented at submit
    Column("token_claims", JSONType, nullable=True),  # inference tokens: the claims at submit
    Column("policy_id", ID, nullable=False),
    Column("policy_name", NAME, nullable=False),  # for "policy \"<name>\" was deleted" once it is gone
    Column("project_id", ID, nullable=False),
    Column("team_id", ID, nullable=False),
    Column("principal_kind", String(16), nullable=False),
    Column("principal_id", ID, nullable=False),
    Column("credential_kind", String(8), nullable=False),
    Column("credential_id", String(64), nullable=False),
    Column("inbound_shape", String(32), nullable=False),
    Column("status", String(16), nullable=False),
    Column("total_items", Integer, nullable=False),
    _ts("created_at"),
    _ts("completed_at", nullable=True),
    _ts("last_claimed_at", nullable=True),  # round-robin over batches: the least recently served first
    # The store holding its items' bodies (SPEC §10.7): the one it was submitted under, for good.
    Column("payload_store", String(16), nullable=False, server_default=text("'files'")),
    CheckConstraint("status IN ('queued', 'cancelled')", name="status"),
    CheckConstraint("payload_store IN ('files', 'database')", name="payload_store"),
    CheckConstraint("total_items > 0", name="total_items_positive"),
    CheckConstraint("inbound_shape IN ('openai', 'anthropic', 'openai_responses')", name="inbound_shape"),
    CheckConstraint("principal_kind IN ('serviceaccount', 'user')", name="principal_kind"),
    # What the runner re-checks the credential with (SPEC §10.6): the key hash, or the token's claims.
    CheckConstraint(
        "(credential_kind = 'key' AND key_hash IS NOT NULL AND token_claims IS NULL)"
        " OR (credential_kind = 'token' AND token_claims IS NOT NULL AND key_hash IS NULL)",
        name="credential_recorded",
    ),
    # The claim query walks only open batches (completed ones accumulate forever).
    Index("ix_batches_open", "last_claimed_at", "created_at", **_where("completed_at IS NULL")),
)

# One row per item: its state (SPEC §10.2), once final its error. ``claimed_by``/``claimed_at``: on an
# ``available`` item a reservation (claimed ahead, not started); else who ran it, since when.
batch_items = Table(
    "batch_items",
    metadata,
    Column("batch_id", ID, ForeignKey("batches.id", ondelete="CASCADE"), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("claimed_by", String(200), nullable=True),  # the instance id of the replica running it
    _ts("claimed_at", nullable=True),
    _ts("finished_at", nullable=True),
    Column("status", Integer, nullable=True),  # the upstream's HTTP status when one answered
    Column("error", Text, nullable=True),
    # A completed item's response body: ``response_length`` bytes at ``response_offset`` of the file
    # ``response_file`` in the batch's payload directory (relay.batches.payloads). NULL for items
    # completed by versions that wrote one file per item.
    Column("response_file", String(40), nullable=True),
    Column("response_offset", BigInteger, nullable=True),
    Column("response_length", Integer, nullable=True),
    PrimaryKeyConstraint("batch_id", "idx"),
    CheckConstraint("idx >= 0", name="idx_not_negative"),
    CheckConstraint("state IN ('available', 'running', 'completed', 'discarded', 'cancelled')", name="state"),
    CheckConstraint(
        "(state IN ('completed', 'discarded', 'cancelled')) = (finished_at IS NOT NULL)",
        name="final_states_have_finished_at",
    ),
    CheckConstraint(
        "state <> 'running' OR (claimed_by IS NOT NULL AND claimed_at IS NOT NULL)",
        name="running_items_have_a_claimant",
    ),
    CheckConstraint("(claimed_by IS NULL) = (claimed_at IS NULL)", name="claims_are_whole"),
    # The results endpoint (SPEC §10.3): a discarded item says why, a cancelled one says "cancelled".
    CheckConstraint(
        "(state IN ('discarded', 'cancelled')) = (error IS NOT NULL)", name="failed_items_have_an_error"
    ),
    CheckConstraint(
        "(response_file IS NULL AND response_offset IS NULL AND response_length IS NULL)"
        " OR (state = 'completed' AND response_file IS NOT NULL AND response_offset IS NOT NULL"
        " AND response_length IS NOT NULL AND response_offset >= 0 AND response_length >= 0)",
        name="responses_are_whole_and_completed",
    ),
    # The claim query: a batch's available items in idx order. Finished items never enter it, so a claim
    # costs the same at item 0 and at item 49 999.
    Index("ix_batch_items_available", "batch_id", "idx", **_where("state = 'available'")),
    # The claim proper (available, not reserved), and reservations by replica.
    Index(
        "ix_batch_items_unreserved", "batch_id", "idx", **_where("state = 'available' AND claimed_by IS NULL")
    ),
    Index(
        "ix_batch_items_reserved", "claimed_by", **_where("state = 'available' AND claimed_by IS NOT NULL")
    ),
    # The rescue query (every running item: at most the workers of all replicas) and the completion
    # check ("does this batch still run anything?").
    Index("ix_batch_items_running", "batch_id", "claimed_by", **_where("state = 'running'")),
)

# Bodies under RELAY_BATCH_PAYLOAD_STORE=database (SPEC §10.7; later §14's files), in chunks of at most
# ``store.payloads.CHUNK_BYTES``. ``owner_id``: the batch (or file) id; ``idx``: the item (0 for a file).
payload_chunks = Table(
    "payload_chunks",
    metadata,
    Column("owner_id", ID, nullable=False),
    Column("kind", String(8), nullable=False),
    Column("idx", Integer, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    PrimaryKeyConstraint("owner_id", "kind", "idx", "seq"),
    CheckConstraint("kind IN ('request', 'response', 'file')", name="kind"),
    CheckConstraint("idx >= 0 AND seq >= 0", name="positions_not_negative"),
)

# Replica liveness for the batch queue (SPEC §10.6): one row per replica running workers, its heartbeat
# refreshed periodically and deleted on a clean stop. The running items of a replica whose heartbeat is
# stale, or that has no row, are discarded with "worker lost: ".
batch_workers = Table(
    "batch_workers",
    metadata,
    Column("instance_id", String(200), primary_key=True),
    _ts("started_at"),
    _ts("heartbeat_at"),
)

# One row (id = 1) whose revision every catalog write bumps in the same transaction. Replicas compare
# it with their snapshot's revision: the notice (LISTEN/NOTIFY) makes reloads fast, the revision makes
# them certain even when a notice was missed during a reconnect.
catalog_revision = Table(
    "catalog_revision",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("revision", Integer, nullable=False),
    _ts("updated_at"),
    CheckConstraint("id = 1", name="single_row"),
)

CATALOG_TABLES = (
    teams,
    policies,
    projects,
    service_accounts,
    users,
    user_memberships,
    hosts,
    host_keys,
    models,
    model_aliases,
    bindings,
    policy_host_keys,
    relay_keys,
    settings,
)
