"""What the control API's non-catalog routes answer, as pydantic models, for the OpenAPI document
(SPEC §11: ``GET /api/openapi.json`` declares real response schemas).

The routes build plain dicts (fast, and shaped by the services); these models describe those dicts
field for field, so the document can tell a client exactly what comes back. They are strict
(``extra="forbid"``: ``additionalProperties: false``), so ``tests/hostile/test_openapi_answers.py``,
which validates real answers of every route against the document, fails on a field that is answered
but not declared as well as on a declared one that is missing or of another type.

What it deliberately does not know: how the answers are built; nothing here is used at request time
(the routes do not validate their output against these models: the test does).

Invariants: a field that is always present but may be null is required and nullable; a field that
only some answers carry (a summary row's ``name``) has a default, so it is not required.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from relay.control.kinds import KINDS
from relay.domain.audit import ActorKind, AuditAction


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- operations ---------------------------------------------------------------------------------------


class ExportDocument(Answer):
    kind: str = Field(json_schema_extra={"enum": [kind.name for kind in KINDS]})
    name: str
    spec: dict[str, Any] = Field(description="the kind's fields, references by name, no secret")


class Export(Answer):
    documents: list[ExportDocument]


class Revision(Answer):
    revision: int


class SnapshotStatus(Answer):
    revision: int
    loaded_at: float = Field(description="Unix time of the rebuild")
    counts: dict[str, int]
    problems: list[str]


# -- credentials --------------------------------------------------------------------------------------


class RelayKey(Answer):
    id: str
    name: str | None
    prefix: str
    principal_kind: Literal["serviceaccount", "user"]
    principal: str | None
    principal_id: str
    project: str | None
    project_id: str | None
    policy: str | None
    policy_id: str | None
    enabled: bool
    expires_at: datetime | None
    revoked_at: datetime | None
    grace_until: datetime | None
    payload_logging: bool
    created_at: datetime
    updated_at: datetime


class RelayKeys(Answer):
    items: list[RelayKey]


class NewRelayKey(Answer):
    key: RelayKey
    plaintext: str = Field(pattern="^sk-relay-", description="shown once")


class InferenceToken(Answer):
    token: str
    jti: str
    expires_at: datetime


class Session(Answer):
    session: str


class TokensRevoked(Answer):
    user_id: str
    token_version: int


class TokenRevoked(Answer):
    jti: str
    revoked: Literal[True]
    expires_at: datetime


# -- usage and settings -------------------------------------------------------------------------------


class UsageEvent(Answer):
    id: str
    ts: datetime
    request_id: str
    source: Literal["live", "batch"]
    batch_id: str | None
    batch_idx: int | None
    status: int = Field(description="upstream HTTP status; 0: never reached")
    error_kind: str | None
    error_message: str | None
    model: str
    requested_model: str
    upstream_model: str
    host: str
    adapter: str
    inbound_shape: str
    host_key_id: str | None
    attempts: int
    streamed: bool
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    reasoning_tokens: int | None = Field(
        description="of output_tokens, those the upstream reported as reasoning (OpenAI chat and Responses"
        " APIs); null when it reports no such count"
    )
    cost_nanos: int | None
    latency_ms: int
    ttft_ms: int | None
    policy_id: str
    project_id: str
    team_id: str
    principal_kind: str
    principal_id: str
    credential_kind: str
    credential_id: str
    relay_key_hash: str | None
    cache_hit: bool = Field(
        description="answered from the response cache: status 200, attempts 0, no host key, cost 0"
    )
    guardrails: list[dict[str, str]] | None = Field(
        None, description='the guardrails that blocked or redacted: [{"name", "stage", "action"}]'
    )
    offloaded: bool = Field(
        False, description="a batch item a provider's own batch API ran, priced at the binding's discount"
    )


class UsageEvents(Answer):
    events: list[UsageEvent]
    next_cursor: str | None


class SummaryRow(Answer):
    group: str
    name: str | None = Field(None, description="project, team, policy and credential groups only")
    requests: int
    errors: int = Field(description="failed events; cancelled batch items are not errors")
    cancelled: int = Field(description="batch items a cancel stopped or never started")
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost_nanos: int | None
    p50_latency_ms: float | None
    p95_latency_ms: float | None


class UsageSummary(Answer):
    rows: list[SummaryRow]


class CapturedPayload(Answer):
    request_id: str
    ts: datetime
    request: Any = Field(description="JSON when the body parses, else text")
    response: Any = Field(description="JSON when the body parses, else text (an SSE stream)")
    request_truncated: bool
    response_truncated: bool


class PayloadLogging(Answer):
    enabled: bool
    max_bytes: int


class SpendEntry(Answer):
    key: str = Field(description="the policy id (per: policy), else the credential, project or team id")
    spent_usd: float
    remaining_usd: float
    resets_at: datetime


class SpendRule(Answer):
    index: int = Field(description="the rule's position in the policy's rate_limits")
    window: str
    per: str
    limit_usd: float
    entries: list[SpendEntry]


class PolicySpend(Answer):
    rules: list[SpendRule]


class CachePurged(Answer):
    policy: str = Field(description="the policy's name")
    purged: int = Field(description="cached answers removed (this process's, or every replica's in Redis)")


# -- batches of every owner ---------------------------------------------------------------------------


class BatchOffloadView(Answer):
    binding_id: str | None = Field(description="the binding whose host runs (or refused) the batch")
    provider_batch_id: str | None = Field(description="the provider's id for the batch, once created")
    provider_state: str | None = Field(description="the provider's status as last polled")
    reason: str | None = Field(description="why a batch the provider refused runs on Relay's workers")


class AdminBatch(Answer):
    id: str
    api: str
    owner: str = Field(description="user:<user id> or key:<relay key id>, never a key's hash")
    state: Literal["in_progress", "completed", "cancelled"]
    status: Literal["queued", "cancelled"]
    inbound_shape: str
    project_id: str
    team_id: str
    policy_id: str
    policy_name: str
    principal_kind: str
    principal_id: str
    credential_kind: str
    credential_id: str
    total_items: int
    finished_items: int
    counts: dict[str, int]
    created_at: datetime
    completed_at: datetime | None
    offloaded: bool = Field(description="a provider's batch API runs it (provider batch offload)")
    offload: BatchOffloadView | None = Field(description="null: never offloaded")


class AdminBatches(Answer):
    items: list[AdminBatch]
    next_cursor: str | None


class FailureGroup(Answer):
    cause: str
    count: int
    examples: list[str]


class AdminBatchDetail(AdminBatch):
    failures: list[FailureGroup]


class Cancelled(Answer):
    status: Literal["cancelled"]


class WebhookDelivery(Answer):
    id: str
    event_id: str
    type: str
    attempt: int
    status_code: int | None  # null on a timeout or a connection error
    latency_ms: int | None
    error: str | None
    created_at: str
    next_attempt_at: str | None  # null once delivered or failed


class WebhookDeliveries(Answer):
    items: list[WebhookDelivery]


class WebhookEventQueued(Answer):
    event_id: str
    type: str = Field(description="the event's type: webhook.test for a test event")
    state: Literal["pending"]


class AuditActor(Answer):
    kind: ActorKind
    id: str | None = None  # left out for the admin token
    email: str | None = None


class AuditEntry(Answer):
    id: str
    at: str
    actor: AuditActor
    action: AuditAction
    kind: str
    ref: str
    before: dict[str, Any] | None = Field(
        None, description="left out when empty; write-only fields <redacted>"
    )
    after: dict[str, Any] | None = Field(
        None, description="left out when empty; write-only fields <redacted>"
    )
    ip: str | None
    user_agent: str | None
    request_id: str | None
    prev_hash: str
    hash: str


class AuditEntries(Answer):
    items: list[AuditEntry]
    next_cursor: str | None


class AuditVerdict(Answer):
    ok: bool
    entries: int
    first_bad: str | None


#: (method, path) → (status, model) of every non-catalog route's success answer.
ANSWERS: dict[tuple[str, str], tuple[str, type[Answer]]] = {
    ("get", "/api/export"): ("200", Export),
    ("post", "/api/reload"): ("200", Revision),
    ("get", "/api/snapshot"): ("200", SnapshotStatus),
    ("get", "/api/keys"): ("200", RelayKeys),
    ("post", "/api/keys"): ("201", NewRelayKey),
    ("get", "/api/keys/{ref}"): ("200", RelayKey),
    ("patch", "/api/keys/{ref}"): ("200", RelayKey),
    ("post", "/api/keys/{ref}/rotate"): ("200", NewRelayKey),
    ("post", "/api/keys/{ref}/revoke"): ("200", RelayKey),
    ("post", "/api/users/{ref}/tokens"): ("201", InferenceToken),
    ("post", "/api/users/{ref}/revoke-tokens"): ("200", TokensRevoked),
    ("delete", "/api/tokens/{jti}"): ("200", TokenRevoked),
    ("post", "/api/auth/login"): ("200", Session),
    ("post", "/api/auth/token"): ("201", InferenceToken),
    ("get", "/api/usage/events"): ("200", UsageEvents),
    ("get", "/api/usage/summary"): ("200", UsageSummary),
    ("get", "/api/payloads/{request_id}"): ("200", CapturedPayload),
    ("get", "/api/settings/payload_logging"): ("200", PayloadLogging),
    ("put", "/api/settings/payload_logging"): ("200", PayloadLogging),
    ("get", "/api/policies/{ref}/spend"): ("200", PolicySpend),
    ("delete", "/api/policies/{ref}/cache"): ("200", CachePurged),
    ("get", "/api/batches"): ("200", AdminBatches),
    ("get", "/api/batches/{batch_id}"): ("200", AdminBatchDetail),
    ("get", "/api/webhooks/{ref}/deliveries"): ("200", WebhookDeliveries),
    ("post", "/api/webhooks/{ref}/test"): ("202", WebhookEventQueued),
    ("post", "/api/webhooks/{ref}/events/{event_id}/redeliver"): ("202", WebhookEventQueued),
    ("post", "/api/batches/{batch_id}/cancel"): ("200", Cancelled),
    ("get", "/api/audit"): ("200", AuditEntries),
    ("get", "/api/audit/verify"): ("200", AuditVerdict),
}
