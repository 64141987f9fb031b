"""Batch submissions (SPEC §10.1): what a valid submission is, and the item states (§10.2).

Pure validation over the parsed body: it names the first problem exactly as the SPEC words it
(``requests[7]: …``) so a client can fix its file, and it never inspects an item beyond "is it an
object" and "does it ask for a stream" — items are otherwise judged when they run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BATCH_SHAPES = ("openai", "anthropic", "openai_responses")
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
    batch's payload directory (``relay.batches.payloads``), as its database row records it."""

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
