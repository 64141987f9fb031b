"""The batch engine's tables (SPEC §10, §10.7): batches, their items, payload chunks and the replicas'
worker rows. Part of ``relay.store.tables``' metadata (the Alembic target); kept apart so that module
stays one screenful of catalog, credentials and usage.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    text,
)

from relay.store.columns import ID, NAME, JSONType, _ts, _where, metadata

#: Which batches the §14 finalizer polls for: its query spells the same predicate with literal values
#: (``relay.store.facade_batches``), so both dialects' planners match it to the partial index. The
#: state names are the OpenAI façade's (``relay.batch_apis.openai_service``: FINALIZING, CLAIM_PREFIX).
FINALIZE_API = "openai"
FINALIZE_WAITING_STATUS = "finalizing"
FINALIZE_CLAIM_PREFIX = "fin@"
FINALIZE_WAITING = (
    f"api = '{FINALIZE_API}' AND completed_at IS NOT NULL"
    f" AND (api_status = '{FINALIZE_WAITING_STATUS}' OR api_status LIKE '{FINALIZE_CLAIM_PREFIX}%')"
)

#: Which batches the offload poller walks (SPEC §22): open ones a provider runs. Spelled once so the
#: poller's query and the partial index agree.
OFFLOAD_OPEN = "completed_at IS NULL AND offload_state IS NOT NULL"

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
    # The API that created it (SPEC §10.10, §14, §15); the engine treats every API's batches alike.
    Column("api", String(16), nullable=False, server_default=text("'relay'")),
    _ts("expires_at", nullable=True),  # §14/§15: items not final by then are cancelled ("expired: ")
    _ts("cancel_requested_at", nullable=True),  # set by every cancel, whatever the API
    # Façade-owned state and fields (``validating``, ``finalizing``, …; OpenAI's endpoint, metadata,
    # file ids, errors, per-state timestamps): the engine stores them, never reads them.
    Column("api_status", String(16), nullable=True),
    Column("api_data", JSONType, nullable=True),
    # A retry batch (SPEC §17): the batch it was made from. No foreign key: the original may be deleted
    # (retention) while the retry stays readable, still naming where it came from.
    Column("retry_of", ID, nullable=True),
    # The traceparent of the span that created it (SPEC §18), when that span was sampled: each item's
    # trace links to it. NULL: its items are not traced.
    Column("trace_parent", String(64), nullable=True),
    # Provider batch offload (SPEC §22). ``offload_binding_id``: the binding whose host runs the batch
    # natively (no foreign key, like the attribution above); ``offload_batch_id``: the provider's id for
    # it once created; ``offload_state``: the provider's status as last polled (``submitting`` before
    # the create answered); ``offload_polled_at``: when a replica last polled it (the poll claims the
    # least recently polled first). ``offload_reason``: why a batch that qualified runs on Relay's
    # workers instead (the provider refused it at create). All NULL: a gateway-run batch.
    Column("offload_binding_id", ID, nullable=True),
    Column("offload_batch_id", String(200), nullable=True),
    Column("offload_state", String(32), nullable=True),
    _ts("offload_polled_at", nullable=True),
    Column("offload_reason", Text, nullable=True),
    # The host key the batch was sent with (0023): its polls, cancel and results use the same account.
    Column("offload_key_id", ID, nullable=True),
    CheckConstraint("status IN ('queued', 'cancelled')", name="status"),
    CheckConstraint("api IN ('relay', 'openai', 'anthropic')", name="api"),
    CheckConstraint("payload_store IN ('files', 'database')", name="payload_store"),
    # An OpenAI batch that failed validation has no items; a §10 batch always has some.
    CheckConstraint("total_items > 0 OR (total_items = 0 AND api <> 'relay')", name="total_items_allowed"),
    CheckConstraint(
        "inbound_shape IN ('openai', 'anthropic', 'openai_responses', 'openai_embeddings')",
        name="inbound_shape",
    ),
    CheckConstraint("principal_kind IN ('serviceaccount', 'user')", name="principal_kind"),
    # What the runner re-checks the credential with (SPEC §10.6): the key hash, or the token's claims.
    CheckConstraint(
        "(credential_kind = 'key' AND key_hash IS NOT NULL AND token_claims IS NULL)"
        " OR (credential_kind = 'token' AND token_claims IS NOT NULL AND key_hash IS NULL)",
        name="credential_recorded",
    ),
    # The claim query walks only open batches (completed ones accumulate forever).
    Index("ix_batches_open", "last_claimed_at", "created_at", **_where("completed_at IS NULL")),
    # The owner's list (SPEC §10.10): keyset newest first.
    Index("ix_batches_owner_created", "owner", "created_at", "id"),
    # The expiry sweep: open batches with a deadline.
    Index("ix_batches_expiring", "expires_at", **_where("completed_at IS NULL AND expires_at IS NOT NULL")),
    # The §14 finalizer's poll (``facade_batches.waiting_to_finalize``, every replica, every
    # RELAY_BATCH_FINALIZE_POLL_S): the few finished OpenAI batches waiting for their files or claimed
    # for them; ended batches accumulate forever and never enter it.
    Index("ix_batches_finalizing", "completed_at", "id", **_where(FINALIZE_WAITING)),
    # The offload poller (SPEC §22, every replica): the open offloaded batches, least recently polled
    # first; gateway-run and ended batches never enter it.
    Index("ix_batches_offloaded", "offload_polled_at", "id", **_where(OFFLOAD_OPEN)),
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
    # ``response_file`` in the batch's payload directory (relay.payloads.directory). NULL for items
    # completed by versions that wrote one file per item.
    Column("response_file", String(40), nullable=True),
    Column("response_offset", BigInteger, nullable=True),
    Column("response_length", Integer, nullable=True),
    Column("custom_id", Text, nullable=True),  # §14/§15: the caller's name for the item
    Column("source_idx", Integer, nullable=True),  # a retry batch's item (§17): its idx in the original
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

# How many of a batch's items are in each final state (SPEC §10.2's constant-cost view, §17 "Scale"):
# bumped by every transaction that makes items final, in that transaction, after the batch's advisory
# lock (so finishers of one batch never wait on each other in two orders). No row: nothing final yet.
# ``available`` and ``running`` are not counted: ``running`` is read from its partial index (at most
# the workers of every replica), ``available`` is the rest of ``batches.total_items``.
batch_counters = Table(
    "batch_counters",
    metadata,
    Column("batch_id", ID, ForeignKey("batches.id", ondelete="CASCADE"), primary_key=True),
    Column("completed", Integer, nullable=False, server_default=text("0")),
    Column("discarded", Integer, nullable=False, server_default=text("0")),
    Column("cancelled", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("completed >= 0 AND discarded >= 0 AND cancelled >= 0", name="not_negative"),
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

# Fair share across projects (SPEC §17): when a claim last served each project. The claim serves the
# project whose turn is oldest (never-served first); a row outlives the project's batches, so a project
# whose batch just finished does not jump the queue with its next one. One small row per project.
batch_project_turns = Table(
    "batch_project_turns",
    metadata,
    Column("project_id", ID, primary_key=True),
    _ts("last_claimed_at"),
)

# The Files API's files (SPEC §14): uploads (purpose ``batch``) and the output and error files Relay
# writes (``batch_output``). The bytes live in the payload store the row names (``files``: a file under
# the payload directory; ``database``: ``payload_chunks`` kind ``file``). A row is ``uploading`` while
# its bytes are being written and ``processed`` once they are whole; only ``processed`` rows that have
# not expired are ever shown. ``owner``: the uploader as in §10.8 (key sha256, or ``user:<id>``).
files = Table(
    "files",
    metadata,
    Column("id", ID, primary_key=True),
    Column("owner", String(80), nullable=False),
    Column("purpose", String(16), nullable=False),
    Column("filename", Text, nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("payload_store", String(16), nullable=False),
    _ts("created_at"),
    _ts("expires_at", nullable=True),
    CheckConstraint("purpose IN ('batch', 'batch_output')", name="purpose"),
    CheckConstraint("status IN ('uploading', 'processed')", name="status"),
    CheckConstraint("payload_store IN ('files', 'database')", name="payload_store"),
    CheckConstraint("bytes >= 0", name="bytes_not_negative"),
    # The list (SPEC §14): one owner's files in id order (ids sort by creation time).
    Index("ix_files_owner", "owner", "id"),
    # The expiry sweep.
    Index("ix_files_expires_at", "expires_at", **_where("expires_at IS NOT NULL")),
)

# Idempotent batch creates (SPEC §10.10): the first answer to ``(owner, key)``, written in the
# transaction that created the batch, so a repeat within 24 h answers it again and creates nothing.
# ``fingerprint``: sha256 of the route and the request body (a different body → 409).
idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("owner", String(80), nullable=False),
    Column("key", String(255), nullable=False),
    Column("fingerprint", String(64), nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("body", LargeBinary, nullable=False),
    _ts("created_at"),
    PrimaryKeyConstraint("owner", "key"),
    # The periodic sweep (``idempotency.delete_older``: ``created_at <= cutoff``).
    Index("ix_idempotency_keys_created_at", "created_at"),
)
