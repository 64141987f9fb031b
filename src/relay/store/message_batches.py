"""What the Anthropic Message Batches façade (SPEC §15) reads and deletes in the batch tables.

What it does. :func:`request_counts` counts a page of batches' items the way a MessageBatch shows them
(``processing``, ``succeeded``, ``errored``, ``canceled``, ``expired``) in one GROUP BY;
:func:`delete_ended` removes an ended batch, its items and its bodies kept in the database (one
transaction, the caller's).

What it deliberately does not know. HTTP, the owner rule (the façade checks it before calling) and the
payload files of ``RELAY_BATCH_PAYLOAD_STORE=files`` (never removed: SPEC §10.7). Usage events stay:
they are the record of what ran and was priced (SPEC §8).

Invariants. An item is counted once: ``available``/``running`` are ``processing``, ``completed`` is
``succeeded``, ``discarded`` is ``errored``, ``cancelled`` is ``expired`` when the engine's expiry
cancelled it (its error starts ``expired: ``, ``relay.domain.batches.expired_error``) and ``canceled``
otherwise; so the five always sum to the batch's item count. :func:`delete_ended` deletes nothing of
a batch that has not ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import and_, case, delete, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t

B = t.batches
I = t.batch_items  # noqa: E741  (the item table, next to B)
COUNT_KEYS: Final = ("processing", "succeeded", "errored", "canceled", "expired")
EXPIRED_PREFIX: Final = "expired: "  # relay.domain.batches.expired_error

_STATE_KEYS: Final = {
    "available": "processing",
    "running": "processing",
    "completed": "succeeded",
    "discarded": "errored",
    "cancelled": "canceled",
}


async def request_counts(conn: AsyncConnection, batch_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{batch id: {"processing", "succeeded", "errored", "canceled", "expired"}}`` (every key, zeros
    included) for these batches, in one query."""
    out = {batch_id: dict.fromkeys(COUNT_KEYS, 0) for batch_id in batch_ids}
    if not batch_ids:
        return out
    expired = case(
        (
            and_(I.c.state == literal_column("'cancelled'"), I.c.error.like(f"{EXPIRED_PREFIX}%")),
            literal_column("1"),
        ),
        else_=literal_column("0"),
    ).label("expired")
    rows = await conn.execute(
        select(I.c.batch_id, I.c.state, expired, func.count())
        .where(I.c.batch_id.in_(list(batch_ids)))
        .group_by(I.c.batch_id, I.c.state, expired)
    )
    for batch_id, state, is_expired, count in rows:
        key = "expired" if is_expired else _STATE_KEYS[state]
        out[batch_id][key] += int(count)
    return out


async def delete_ended(conn: AsyncConnection, batch_id: str) -> bool:
    """Delete the batch, its items and its database-held bodies when it has ended (``completed_at``
    set); False (nothing deleted) when it has not, or does not exist."""
    gone = await conn.execute(
        delete(B).where(B.c.id == batch_id, B.c.completed_at.is_not(None)).returning(B.c.id)
    )
    if gone.first() is None:
        return False
    await conn.execute(delete(I).where(I.c.batch_id == batch_id))  # SQLite may not cascade
    await conn.execute(delete(t.payload_chunks).where(t.payload_chunks.c.owner_id == batch_id))
    return True
