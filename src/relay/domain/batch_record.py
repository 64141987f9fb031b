"""A batch as the engine reads it back (SPEC §10.1–§10.3): its record, status view, result rows, and
what a finishing transaction reports of it; pure values, shared by the batch store (which builds them
from rows, ``relay.store.batch_queue``) and the engine and APIs that act on them (``relay.batches``).

Why here. The store builds these values and the engine consumes them: in the domain, both import them
without the engine reaching into the store's SQL module or the store reaching up into the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, NamedTuple

import orjson

from relay.domain.batches import ResponseRef, expired_error

FinalState = Literal["completed", "discarded", "cancelled"]
CANCELLED_ERROR: Final = "cancelled"  # SPEC §10.3: a cancelled item carries "error": "cancelled"


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch row: what the submitter's credential and policy were at submit (SPEC §10.1).

    The runner re-checks the credential from ``key_hash`` (relay keys) or ``token_claims`` (inference
    tokens), runs every item under ``policy_id`` and names the policy by ``policy_name`` once it is
    deleted; usage events carry the rest of the attribution.
    """

    id: str
    owner: str  # the key's sha256, or "user:<id>" for tokens (§10.2 RelayKeyHash)
    key_hash: str | None
    token_claims: dict[str, Any] | None
    policy_id: str
    policy_name: str
    project_id: str
    team_id: str
    principal_kind: str
    principal_id: str
    credential_kind: str  # "key" | "token"
    credential_id: str
    inbound_shape: str
    status: str  # "queued" | "cancelled"
    total_items: int
    created_at: datetime
    completed_at: datetime | None
    payload_store: str = "files"  # where its bodies are (SPEC §10.7): "files" | "database"
    api: str = "relay"  # the API that created it (§10.10); the runner never looks at it
    expires_at: datetime | None = None
    cancel_requested_at: datetime | None = None  # set by a cancel that came before the batch finished
    api_status: str | None = None  # façade-owned (e.g. OpenAI's "validating"); the engine only stores it
    retry_of: str | None = None  # a retry batch (SPEC §17): the id of the batch it was made from
    trace_parent: str | None = None  # SPEC §18: the create span's traceparent (sampled); None: untraced


class ItemState(NamedTuple):
    idx: int
    state: str


class ResultRow(NamedTuple):
    idx: int
    state: str
    error: str | None  # discarded: why; cancelled: "cancelled"; otherwise None
    response: ResponseRef | None  # completed: where its body is (None: a per-item file of old versions)
    custom_id: str | None = None  # the caller's name for the item (§14/§15), None for §10 items
    status: int | None = None  # the upstream's HTTP status when one answered
    source_idx: int | None = None  # a retry batch's item (SPEC §17): its idx in the original


@dataclass(frozen=True, slots=True)
class BatchView:
    """The status view (SPEC §10.2): the record, ``counts`` (only states present) and every item."""

    record: BatchRecord
    counts: dict[str, int]
    # ``[{"idx": 0, "state": "completed"}, …]`` in idx order, as JSON text built by the database: a
    # 50 000-item view would otherwise cost 50 000 rows through the driver and as many Python objects.
    items_json: str

    @property
    def finished(self) -> bool:
        return self.record.completed_at is not None

    @property
    def items(self) -> list[ItemState]:
        return [ItemState(item["idx"], item["state"]) for item in orjson.loads(self.items_json)]


@dataclass(frozen=True, slots=True)
class FinishedBatch:
    id: str
    api: str  # "relay" | "openai" | "anthropic"
    project_id: str
    counts: dict[str, int]  # item state → number, only states present
    cancelled: bool
    expired: bool
    api_status: str | None  # the façade's state as the finishing transaction found it


def is_expired(expires_at: datetime | None, at: datetime | None) -> bool:
    """Whether ``at`` is at or past a batch's deadline (a running batch's items then stop as expired)."""
    if expires_at is None or at is None:
        return False
    return _aware(at) >= _aware(expires_at)


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def stop_error(record: BatchRecord) -> str:
    """The error of an item of this batch stopped before it finished: ``cancelled``, or ``expired: …``
    when the batch is past its ``expires_at`` without a cancel."""
    if (
        record.status == "queued"
        and record.expires_at is not None
        and is_expired(record.expires_at, datetime.now(UTC))
    ):
        return expired_error(record.expires_at)
    return CANCELLED_ERROR
