"""The batch rows of provider batch offload (SPEC §22): marking a batch offloaded or sent back to
Relay's workers, and handing each due poll to exactly one replica.

What it does. :func:`mark_offloaded` records the binding, the provider's batch id and state on an
open batch: from then on the worker claim passes it by (``batch_queue`` claims only batches with no
``offload_state``), and :func:`due_for_poll` offers it to the poller. :func:`run_on_gateway` is the
refusal path: the offload columns are cleared, the reason kept, and the items are the workers' again.
:func:`due_for_poll` claims the open offloaded batches not polled for ``every_s`` (least recently
polled first) by moving their ``offload_polled_at`` to now with a compare-and-set on the value it
read, so concurrent replicas never poll one batch twice in a round, and a replica killed mid-poll
only delays that batch to the next round of whichever replica is alive (nothing else to recover).

What it deliberately does not know: providers, HTTP, how results map into items.

Invariants. Every statement touches only open batches (``completed_at IS NULL``); the poll walks
only ``ix_batches_offloaded`` (its predicate has no parameters, so both planners use it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, literal, null, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store import tables as t
from relay.store.batch_tables import OFFLOAD_OPEN

B = t.batches


@dataclass(frozen=True, slots=True)
class OffloadedBatch:
    """An open offloaded batch as the poller needs it."""

    id: str
    binding_id: str
    provider_batch_id: str | None
    state: str
    cancel_requested: bool
    key_id: str | None = None  # the host key it was (or is to be) sent with


async def mark_offloaded(
    conn: AsyncConnection,
    batch_id: str,
    *,
    binding_id: str,
    provider_batch_id: str | None,
    state: str,
    now: datetime,
) -> bool:
    """Record that the provider runs this open batch (``provider_batch_id`` None and ``state``
    ``submitting`` while the create is on its way). False when the batch is gone or finished."""
    done = await conn.execute(
        update(B)
        .where(B.c.id == batch_id, B.c.completed_at.is_(None))
        .values(
            offload_binding_id=binding_id,
            offload_batch_id=provider_batch_id,
            offload_state=state,
            offload_polled_at=literal(now, t.UTCDateTime()),
        )
    )
    return bool(done.rowcount)


async def poll_again_at(conn: AsyncConnection, batch_id: str, at: datetime, every_s: float) -> None:
    """Hold the batch's next poll until ``at`` (a provider that did not answer: backoff), by moving
    ``offload_polled_at`` to ``at - every_s`` (the claim hands it out ``every_s`` after that)."""
    held = literal(at - timedelta(seconds=every_s), t.UTCDateTime())
    await conn.execute(update(B).where(B.c.id == batch_id).values(offload_polled_at=held))


async def set_provider_state(conn: AsyncConnection, batch_id: str, state: str) -> None:
    """The provider's status as last polled (what the admin API and dashboard show)."""
    await conn.execute(update(B).where(B.c.id == batch_id).values(offload_state=state))


async def run_on_gateway(conn: AsyncConnection, batch_id: str, reason: str) -> bool:
    """The provider refused the batch: its items are Relay's workers' again, and ``reason`` says why
    (SPEC §22). The binding stays recorded. False when the batch is gone or finished."""
    done = await conn.execute(
        update(B)
        .where(B.c.id == batch_id, B.c.completed_at.is_(None))
        .values(
            offload_state=null(), offload_batch_id=null(), offload_polled_at=null(), offload_reason=reason
        )
    )
    return bool(done.rowcount)


async def due_for_poll(
    engine: AsyncEngine, *, every_s: float, now: datetime, limit: int
) -> list[OffloadedBatch]:
    """Claim up to ``limit`` open offloaded batches last polled ``every_s`` ago or more (never-polled
    first, then the least recently polled) for this replica: each is claimed by one caller only."""
    due = literal(now - timedelta(seconds=every_s), t.UTCDateTime())
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(
                    B.c.id,
                    B.c.offload_binding_id,
                    B.c.offload_batch_id,
                    B.c.offload_state,
                    B.c.offload_polled_at,
                    B.c.cancel_requested_at,
                    B.c.offload_key_id,
                )
                .where(text(OFFLOAD_OPEN), or_(B.c.offload_polled_at.is_(None), B.c.offload_polled_at <= due))
                .order_by(B.c.offload_polled_at.asc().nulls_first(), B.c.id)
                .limit(limit)
            )
        ).all()
    claimed: list[OffloadedBatch] = []
    for batch_id, binding_id, provider_id, state, polled_at, cancel_requested_at, key_id in rows:
        was = B.c.offload_polled_at.is_(None) if polled_at is None else B.c.offload_polled_at == polled_at
        async with engine.begin() as conn:
            taken = await conn.execute(
                update(B)
                .where(and_(B.c.id == batch_id, B.c.completed_at.is_(None), was))
                .values(offload_polled_at=literal(now, t.UTCDateTime()))
            )
        if taken.rowcount:
            claimed.append(
                OffloadedBatch(
                    batch_id, binding_id, provider_id, state, cancel_requested_at is not None, key_id
                )
            )
    return claimed
