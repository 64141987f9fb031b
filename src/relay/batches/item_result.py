"""What running a batch item ends with: its final state, error text and its one usage event (SPEC
§10.4), which the finalizer writes with the item's row in one transaction."""

from __future__ import annotations

from dataclasses import dataclass

from relay.domain.batch_record import FinalState
from relay.payloads.base import KeptResponse
from relay.usage.event import UsageEvent


@dataclass(slots=True)
class ItemResult:
    state: FinalState
    status: int | None  # the upstream's HTTP status when one answered
    error: str | None
    event: UsageEvent
    response: KeptResponse | None = None  # a completed item's body, as its payload store keeps it
    store: str = "files"  # that store (the batch's)


def response_lost(result: ItemResult, exc: OSError) -> ItemResult:
    """A completed item whose response body could not be put on disk: it is discarded (the results
    could not give its response), its event keeps what the upstream call cost."""
    message = f"internal error: the response could not be stored ({exc.strerror or type(exc).__name__})"
    result.event.error_kind = "internal"
    result.event.error_message = message
    return ItemResult("discarded", result.status, message, result.event)
