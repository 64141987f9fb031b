"""One page of a batch's items for the dashboard's item table (SPEC §16: "a batch's items are a
filterable, paged table with each failure's error text").

Keyset pagination on the primary key ``(batch_id, idx)``: a page reads at most ``limit + 1`` rows of
the batch however many items it has (a 50 000-item batch's page is as cheap as a 50-item one's), and a
state or error filter walks the same index. The error filter is a case-insensitive substring of the
error text (``ilike``: ``lower() LIKE lower()`` on SQLite, ``ILIKE`` on Postgres), with the LIKE
wildcards of the viewer's text escaped so ``50%`` means the characters ``50%``.

What it deliberately does not know: who may see the batch (the caller checks its scope first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t

I = t.batch_items  # noqa: E741


@dataclass(frozen=True, slots=True)
class ItemFilter:
    state: str | None = None
    error: str | None = None  # a substring of the error text, any case
    after_idx: int = -1


async def item_page(
    conn: AsyncConnection, batch_id: str, filters: ItemFilter, *, limit: int
) -> tuple[list[dict[str, Any]], int | None]:
    """Items in idx order after ``filters.after_idx``, and the idx to continue after (None: the end)."""
    query = select(I.c.idx, I.c.state, I.c.status, I.c.error, I.c.custom_id).where(
        I.c.batch_id == batch_id, I.c.idx > filters.after_idx
    )
    if filters.state is not None:
        query = query.where(I.c.state == filters.state)
    if filters.error:
        escaped = filters.error.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = query.where(I.c.error.ilike(f"%{escaped}%", escape="\\"))
    rows = [dict(r._mapping) for r in await conn.execute(query.order_by(I.c.idx).limit(limit + 1))]
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], int(rows[limit - 1]["idx"])
