"""A batch item's trace (SPEC §18): each run of an item whose batch was created by a traced, sampled
request is a trace of its own, rooted at a ``batch.item`` span that links to the create's span (the
``traceparent`` stored with the batch); its upstream attempts are children of that span, exactly as a
live request's are of its server span.

Why a separate trace per item rather than children of the create: a batch of 50 000 items runs for
hours; one trace that long is unreadable in every trace UI, while links keep the picture whole.

What it deliberately does not know: the item's outcome (the runner ends the span with its final state).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from relay.request.pipeline import Call
    from relay.store.batch_queue import ClaimedItem
    from relay.telemetry.tracing_export import RequestTrace, Tracer


def start(tracer: Tracer | None, item: ClaimedItem, call: Call | None) -> RequestTrace | None:
    """The item's ``batch.item`` span, or ``None`` (tracing off, or its create untraced or unsampled:
    then the item is not traced). ``call``, when the item will call upstream, gets it as its parent."""
    link = item.batch.trace_parent
    if tracer is None or link is None:
        return None
    trace = tracer.item({"relay.batch_id": item.batch.id, "relay.batch_item_idx": item.idx}, link)
    if trace is not None and call is not None:
        call.trace = trace
    return trace


class _Result(Protocol):
    @property
    def state(self) -> str: ...


R = TypeVar("R", bound=_Result)


async def traced(trace: RequestTrace, run: Awaitable[R], held: type[BaseException]) -> R:
    """Await the item's run and end its span with ``relay.batch_item_state``: the final state
    (``discarded``: ERROR), ``held`` when pacing put it back (it runs again later, as another trace),
    or ``cancelled`` when it was stopped (a cancel, an expiry, a shutdown)."""
    state = "cancelled"
    try:
        result = await run
        state = result.state
        return result
    except held:
        state = "held"
        raise
    finally:
        trace.finish({"relay.batch_item_state": state}, state == "discarded")
