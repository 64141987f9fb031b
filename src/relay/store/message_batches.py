"""What the Anthropic Message Batches façade (SPEC §15) reads in the batch tables.

What it does. :func:`request_counts` counts a page of batches' items the way a MessageBatch shows them
(``processing``, ``succeeded``, ``errored``, ``canceled``, ``expired``) in one GROUP BY.

What it deliberately does not know. HTTP, the owner rule (the façade checks it before calling), and
deleting a batch (SPEC §17's one deletion: ``relay.batches.deleter`` over ``relay.store.retention``).

Invariants. An item is counted once: ``available``/``running`` are ``processing``, ``completed`` is
``succeeded``, ``discarded`` is ``errored``, ``cancelled`` is ``expired`` when the engine's expiry
cancelled it (its error starts ``expired: ``, ``relay.domain.batches.expired_error``) and ``canceled``
otherwise; so the five always sum to the batch's item count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from sqlalchemy import and_, case, func, literal_column, select
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
