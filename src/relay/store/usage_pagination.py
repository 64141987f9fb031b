"""SQL for reading usage events newest first, a page at a time (``GET /api/usage/events``, SPEC §8).

It exists so ``relay.store.usage`` holds the writes and the aggregates; a page walk is its own concern:
the keyset query and the opaque cursor that carries the last event's ``(ts, id)`` from one page to the
next. It deliberately does not parse HTTP parameters (``relay.control.services.usage`` does) or build
the filter (:class:`relay.store.usage.EventFilter`).

Invariants. Pages are newest first by ``(ts, id)`` descending, a total order even when timestamps tie,
so walking pages never shows an event twice or skips one that existed when the walk began. A cursor is
only ever the exact text :func:`encode_cursor` wrote; anything else is a ``ValueError``.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import UTC, datetime

from sqlalchemy import literal, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t
from relay.store.catalog import Row
from relay.store.usage import EventFilter

_E = t.usage_events

_EVENT_ID = re.compile(r"^[0-9A-Za-z_-]{1,64}$")


def encode_cursor(ts: datetime, event_id: str) -> str:
    """An opaque page cursor: urlsafe base64 of the last event's (ts, id)."""
    raw = f"{ts.astimezone(UTC).isoformat()}|{event_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (ts, id) inside a cursor; ValueError for anything this module did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, event_id = raw.split("|", 1)
        ts = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("not a cursor this API returned") from None
    if ts.tzinfo is None or not _EVENT_ID.fullmatch(event_id):
        raise ValueError("not a cursor this API returned")
    try:
        # Only the exact text encode_cursor writes is one (an edge offset like 0001-01-01T00:00+14:00
        # has no UTC form and would fail in the query; other forms were never issued).
        canonical = encode_cursor(ts, event_id)
    except (OverflowError, ValueError):
        raise ValueError("not a cursor this API returned") from None
    if canonical != cursor.rstrip("="):
        raise ValueError("not a cursor this API returned")
    return ts, event_id


async def query_events(
    conn: AsyncConnection, filters: EventFilter, *, limit: int, cursor: str | None = None
) -> tuple[list[Row], str | None]:
    """One page of events (newest first) and the cursor of the next page (None at the end).

    Reads ``limit + 1`` rows so the last page is known without a second query."""
    query = select(_E).where(*filters.conditions())
    if cursor is not None:
        ts, event_id = decode_cursor(cursor)
        ts = ts.astimezone(UTC)
        query = query.where(
            tuple_(_E.c.ts, _E.c.id) < tuple_(literal(ts, t.UTCDateTime()), literal(event_id, _E.c.id.type))
        )
    query = query.order_by(_E.c.ts.desc(), _E.c.id.desc()).limit(limit + 1)
    rows = [dict(r._mapping) for r in await conn.execute(query)]
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]["ts"], rows[-1]["id"])
