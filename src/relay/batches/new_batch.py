"""A new batch as an API hands it to the engine (SPEC §10.1, §14, §15): :class:`NewBatch` in,
:class:`CreatedBatch` to render the answer from, the :class:`Answer` sent (and replayed to an
idempotent repeat through an :class:`IdempotencyHook`), and :func:`batch_row`, the ``batches`` row a
create or a retry writes.

It exists so ``relay.batches.service`` holds the service (create, reads, cancel) while these values,
which the façades, the retry and the idempotency claim name, sit apart from it. It deliberately does
nothing: values, one Protocol and one pure function; the create itself is
:meth:`relay.batches.service.BatchService.create`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Protocol

from relay.batches.submission import ItemStream
from relay.domain.batches import Api
from relay.request.auth import Principal
from relay.store.engine import Connection, Engine


@dataclass(frozen=True, slots=True)
class Answer:
    """A create's answer as sent: status code and body bytes (what an idempotent repeat gets again)."""

    status_code: int
    body: bytes


class IdempotencyHook(Protocol):
    """An idempotent create's claim (``relay.batch_apis.idempotency.IdempotencyClaim``; SPEC §10.10),
    opaque to the engine: its row is written in the create's own transaction, and when a concurrent
    duplicate committed first, the first answer is what this create answers."""

    def writer(self, answer: Answer, created_at: datetime) -> Callable[[Connection], Awaitable[None]]: ...

    async def first_answer(self, engine: Engine) -> Answer | None: ...


@dataclass(frozen=True, slots=True)
class NewBatch:
    """What an API submits to the engine (:meth:`BatchService.create`)."""

    api: Api  # "relay" | "openai" | "anthropic": which id prefix, and which API lists it as its own
    shape: str  # the items' shape, one of ENGINE_SHAPES (the runner's shape rule, §10.4)
    requests: Sequence[Any]  # item bodies: JSON objects, or their JSON bytes as they are
    custom_ids: Sequence[str | None] | None = None  # one per item (§14/§15), else none at all
    expires_at: datetime | None = None  # items not final by then are cancelled with "expired: "
    api_status: str | None = None  # the façade's own state (``validating``, ``failed``, …)
    api_data: dict[str, Any] | None = None  # the façade's own fields (endpoint, metadata, …)
    # Items read while they are written (a spooled create, a §14 input file): ``requests`` and
    # ``custom_ids`` are then empty, and ``shape`` and ``custom_ids`` are the stream's once read whole.
    streamed: ItemStream | None = None


@dataclass(frozen=True, slots=True)
class CreatedBatch:
    """What a create's ``render`` gets to build its answer from."""

    id: str
    created_at: datetime
    total_items: int


def batch_row(
    principal: Principal, batch_id: str, created_at: datetime, new: NewBatch, store_name: str
) -> dict[str, Any]:
    """The ``batches`` row of a new batch (a create's or a retry's): the caller's attribution and the
    policy governing the credential now (SPEC §10.1), the items' shape and where their bodies are."""
    return {
        "id": batch_id,
        "created_at": created_at,
        "owner": principal.owner,
        "key_hash": principal.key_hash if principal.credential_kind == "key" else None,
        "token_claims": asdict(principal.token) if principal.token is not None else None,
        "policy_id": principal.policy.id,
        "policy_name": principal.policy.name,
        "project_id": principal.project_id,
        "team_id": principal.team_id,
        "principal_kind": principal.principal_kind,
        "principal_id": principal.principal_id,
        "credential_kind": principal.credential_kind,
        "credential_id": principal.credential_id,
        "inbound_shape": new.shape,
        "payload_store": store_name,
        "api": new.api,
        "expires_at": new.expires_at,
        "api_status": new.api_status,
        "api_data": new.api_data,
    }
