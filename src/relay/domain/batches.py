"""Batch submissions (SPEC §10.1): what a valid submission is, and the item states (§10.2).

Pure validation over the parsed body: it names the first problem exactly as the SPEC words it
(``requests[7]: …``) so a client can fix its file, and it never inspects an item beyond "is it an
object" and "does it ask for a stream" — items are otherwise judged when they run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from relay.domain.ids import mint_id

BATCH_SHAPES = ("openai", "anthropic", "openai_responses")
#: Every item shape the engine runs: §10.1's three, and §14's ``/v1/embeddings`` items.
OPENAI_EMBEDDINGS: Final = "openai_embeddings"
ENGINE_SHAPES: Final = (*BATCH_SHAPES, OPENAI_EMBEDDINGS)

Api = Literal["relay", "openai", "anthropic"]
APIS: Final[tuple[Api, ...]] = ("relay", "openai", "anthropic")
#: The id prefix each API hands out (SPEC §10.10): ``b_…``, ``batch_…``, ``msgbatch_…``.
BATCH_ID_PREFIXES: Final[dict[str, str]] = {"relay": "b", "openai": "batch", "anthropic": "msgbatch"}
BATCH_ID_RE: Final = re.compile(r"^(?:b|batch|msgbatch)_[0-9a-z]{26}$")


EXPIRED_PREFIX: Final = "expired: "  # every item a batch's expiry cancelled carries an error starting so


def expired_error(expires_at: datetime) -> str:
    """The error of an item a batch's expiry cancelled (grouped as its own cause, "expired")."""
    at = expires_at if expires_at.tzinfo is not None else expires_at.replace(tzinfo=UTC)
    return f"{EXPIRED_PREFIX}batch expired at {at.astimezone(UTC).isoformat().replace('+00:00', 'Z')}"


def mint_batch_id(api: Api) -> str:
    """A new batch id of ``api`` (the one place batch ids are minted)."""
    return mint_id(BATCH_ID_PREFIXES[api])


def is_batch_id(value: str) -> bool:
    """True for an id of any API's batch: a known prefix and the base32 body of ``mint_id``."""
    return bool(BATCH_ID_RE.fullmatch(value))


AVAILABLE = "available"
RUNNING = "running"
COMPLETED = "completed"
DISCARDED = "discarded"
CANCELLED = "cancelled"
ITEM_STATES = (AVAILABLE, RUNNING, COMPLETED, DISCARDED, CANCELLED)
FINAL_STATES = frozenset((COMPLETED, DISCARDED, CANCELLED))


@dataclass(frozen=True, slots=True)
class ResponseRef:
    """Where a completed item's response body is: ``length`` bytes at ``offset`` of ``file`` in its
    batch's payload directory (``relay.payloads.directory``), as its database row records it."""

    file: str
    offset: int
    length: int


class BatchRejected(ValueError):
    """The submission is refused (400); the message says why."""


def validate_submission(body: Any, max_items: int) -> tuple[str, list[dict[str, Any]]]:
    """``(shape, requests)`` of a valid submission, else :class:`BatchRejected` naming the problem."""
    if not isinstance(body, dict):
        raise BatchRejected("the body must be a JSON object with shape and requests")
    if "shape" not in body:
        raise BatchRejected(f"shape is required: one of {', '.join(BATCH_SHAPES)}")
    shape = body["shape"]
    if shape not in BATCH_SHAPES:
        raise BatchRejected(
            f"shape {shape!r} cannot be batched: use one of {', '.join(BATCH_SHAPES)} "
            "(canonical and embeddings requests cannot be batched)"
        )
    if "requests" not in body:
        raise BatchRejected("requests is required: a non-empty list of request bodies")
    requests = body["requests"]
    if not isinstance(requests, list):
        raise BatchRejected("requests must be a list of request bodies")
    if not requests:
        raise BatchRejected("requests must not be empty")
    if len(requests) > max_items:
        raise BatchRejected(
            f"requests has {len(requests)} items; at most {max_items} are allowed (RELAY_BATCH_MAX_ITEMS)"
        )
    for index, item in enumerate(requests):
        if not isinstance(item, dict):
            raise BatchRejected(f"requests[{index}]: must be a JSON object (a request body)")
        if item.get("stream") is True:
            raise BatchRejected(f"requests[{index}]: stream is not allowed (items run unstreamed)")
    return shape, requests
