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

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from relay.store.columns import ID, NAME, JSONType, UTCDateTime, _common, _ref, _ts, _where, metadata

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
    Column("batch", JSONType, nullable=True),  # SPEC §17's block; NULL: the defaults (migration 0012)
    Column("cache", JSONType, nullable=True),  # SPEC §19's block; NULL: no cache (migration 0018)
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
    Column("breaker", JSONType, nullable=True),  # {"threshold", "window_s", "max_open_s"}; NULL: untuned
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
    # {"mode", "min_items", "discount"} as validated (relay.domain.batch_offload); NULL: never offload.
    Column("batch_offload", JSONType, nullable=True),
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

# SPEC §20: a guardrail is a catalog object of its own; a policy names its guardrails in order.
guardrails = Table(
    "guardrails",
    metadata,
    *_common(),
    Column("stage", String(16), nullable=False),
    Column("action", String(16), nullable=False),
    Column("regex", JSONType, nullable=True),  # ["<pattern>", …]; exactly one matcher is not NULL
    Column("pii", JSONType, nullable=True),  # ["email", …]
    Column("webhook", JSONType, nullable=True),  # {"url", "timeout_ms", "fail"}
    Column("message", String(500), nullable=False, server_default=""),
    CheckConstraint("stage IN ('input', 'output')", name="stage"),
    CheckConstraint("action IN ('block', 'redact')", name="action"),
)

# A policy's guardrails (its parts: CASCADE with the policy; a named guardrail cannot be deleted).
policy_guardrails = Table(
    "policy_guardrails",
    metadata,
    _ref("policy_id", "policies", nullable=False, ondelete="CASCADE"),
    _ref("guardrail_id", "guardrails", nullable=False),
    Column("position", Integer, nullable=False),
    PrimaryKeyConstraint("policy_id", "guardrail_id"),
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
    # of output_tokens, what the upstream reports as reasoning (SPEC §14's Batch usage sums it); NULL:
    # the upstream reports none (Anthropic, embeddings) or the event predates 0011
    Column("reasoning_tokens", BigInteger, nullable=True),
    Column("cost_nanos", BigInteger, nullable=True),  # integer nano-USD; NULL: unpriced or nothing ran
    # answered from the response cache (SPEC §19): cost 0, attempts 0, no host key; false before 0018
    Column("cache_hit", Boolean, nullable=False, server_default="0"),
    # run by a provider's own batch API (SPEC §22), priced at the binding's discount; false before 0023
    Column("offloaded", Boolean, nullable=False, server_default="0"),
    # the guardrails that blocked or redacted (SPEC §20): [{"name", "stage", "action"}]; NULL: none
    Column("guardrails", JSONType, nullable=True),
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
    guardrails,
    policy_guardrails,
    relay_keys,
    settings,
)


# The batch engine's, audit log's, usage rollup's and webhooks' tables live in their own modules
# (same metadata): imported here so that ``tables.<name>`` and the Alembic target cover every table.
from relay.store.audit_tables import audit_entries  # noqa: E402
from relay.store.batch_tables import (  # noqa: E402
    batch_counters,
    batch_items,
    batch_project_turns,
    batch_workers,
    batches,
    files,
    idempotency_keys,
    payload_chunks,
)
from relay.store.rollup_tables import usage_rollup  # noqa: E402
from relay.store.webhook_tables import webhook_deliveries, webhook_events, webhooks  # noqa: E402

__all__ = [
    "ID",
    "NAME",
    "JSONType",
    "UTCDateTime",
    "audit_entries",
    "batch_counters",
    "batch_items",
    "batch_project_turns",
    "batch_workers",
    "batches",
    "files",
    "idempotency_keys",
    "metadata",
    "payload_chunks",
    "usage_rollup",
    "webhook_deliveries",
    "webhook_events",
    "webhooks",
]
