"""Reads of batches across every owner, for the admin batch API (SPEC §11) and the dashboard (§16).

What it does. :func:`list_batches` pages through batches newest first with filters (keyset on
``(created_at, id)``, so page 1 000 costs what page 1 costs); :func:`item_counts` gives the item
states of a page's batches from their counters (one query whatever the batches' sizes);
:func:`failure_errors` groups a batch's discarded items by their error text (the caller groups those
by §10.4 cause). The batch writes and the other owner-scoped reads of ``/v1/batches`` are the batch
store's (``relay.store.batch_queue``); :func:`owner_page` is the owner's own list (SPEC §10.10),
every API's batches together.

Batch state, as filtered here: ``in_progress`` (items still open: ``completed_at`` is null),
``completed`` (finished without a cancel) and ``cancelled``. The §14/§15 batch APIs add their own rows
and states; ``api`` tells which API a batch belongs to (``relay``, ``openai``, ``anthropic``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import ColumnElement, and_, func, literal, literal_column, null, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batches import ITEM_STATES
from relay.store import tables as t
from relay.store.catalog import Row

B = t.batches
C = t.batch_counters
I = t.batch_items  # noqa: E741
STATES: Final = ("in_progress", "completed", "cancelled")
APIS: Final = ("relay", "openai", "anthropic")
MAX_ERROR_GROUPS: Final = 1000  # distinct error texts read per batch (causes group them further)


@dataclass(frozen=True, slots=True)
class BatchFilter:
    project_ids: tuple[str, ...] | None = None  # None: every project; () matches nothing
    team_id: str | None = None
    owner: str | None = None
    state: str | None = None
    api: str | None = None
    created_from: datetime | None = None  # inclusive
    created_to: datetime | None = None  # exclusive

    def conditions(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = []
        if self.project_ids is not None:
            out.append(B.c.project_id.in_(self.project_ids) if self.project_ids else literal(False))
        if self.team_id is not None:
            out.append(B.c.team_id == self.team_id)
        if self.owner is not None:  # "user:<user id>" or "key:<relay key id>" (see owner_of)
            kind, _, ident = self.owner.partition(":")
            if kind == "user":
                out.append(B.c.owner == self.owner)
            else:
                out.append(and_(B.c.credential_kind == literal_column("'key'"), B.c.credential_id == ident))
        if self.api is not None:
            out.append(B.c.api == self.api)
        if self.state == "in_progress":
            out.append(B.c.completed_at.is_(None))
        elif self.state == "completed":
            out.append(and_(B.c.completed_at.is_not(None), B.c.status == literal_column("'queued'")))
        elif self.state == "cancelled":
            out.append(B.c.status == literal_column("'cancelled'"))
        if self.created_from is not None:
            out.append(B.c.created_at >= literal(self.created_from, t.UTCDateTime()))
        if self.created_to is not None:
            out.append(B.c.created_at < literal(self.created_to, t.UTCDateTime()))
        return out


def encode_cursor(created_at: datetime, batch_id: str) -> str:
    raw = f"{created_at.astimezone(UTC).isoformat()}|{batch_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) inside a cursor; ValueError for anything this module did not make."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, batch_id = raw.split("|", 1)
        created = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("not a cursor this API returned") from None
    if created.tzinfo is None or not batch_id:
        raise ValueError("not a cursor this API returned")
    return created, batch_id


def owner_of(row: Row) -> str:
    """Who owns a batch, as the admin API names it: ``user:<user id>`` for a user's tokens (one owner,
    SPEC §10.8), ``key:<relay key id>`` for a relay key. Never the key's hash (SPEC §3.1)."""
    if row["credential_kind"] == "key":
        return f"key:{row['credential_id']}"
    return str(row["owner"])


def state_of(row: Row) -> str:
    if row["status"] == "cancelled":
        return "cancelled"
    return "in_progress" if row["completed_at"] is None else "completed"


async def list_batches(
    conn: AsyncConnection, filters: BatchFilter, *, limit: int, cursor: str | None = None
) -> tuple[list[Row], str | None]:
    """One page of batch rows (newest first) and the next page's cursor (None on the last page)."""
    query = select(B).where(*filters.conditions())
    if cursor is not None:
        created, batch_id = decode_cursor(cursor)
        query = query.where(
            tuple_(B.c.created_at, B.c.id)
            < tuple_(literal(created.astimezone(UTC), t.UTCDateTime()), literal(batch_id, B.c.id.type))
        )
    query = query.order_by(B.c.created_at.desc(), B.c.id.desc()).limit(limit + 1)
    rows = [dict(r._mapping) for r in await conn.execute(query)]
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1]["created_at"], rows[-1]["id"])


async def owner_page(
    conn: AsyncConnection,
    owner: str,
    *,
    limit: int,
    after: str | None = None,
    before: str | None = None,
    api: str | None = None,
) -> tuple[list[Row], bool] | None:
    """One page of ``owner``'s batches, newest first, and whether more follow in the paging
    direction. ``after``: the batches older than that batch (keyset on ``(created_at, id)``);
    ``before`` (§15's ``before_id``): the ``limit`` batches just newer than it, still newest first.
    None when the batch named is not one of the owner's (of ``api``, when given). Two queries
    (``ix_batches_owner_created``)."""
    if after is not None and before is not None:
        raise ValueError("page after a batch or before one, not both")
    scope = [B.c.owner == owner, *([B.c.api == api] if api is not None else [])]
    query = select(B).where(*scope)
    anchor = after if after is not None else before
    newer = before is not None
    if anchor is not None:
        found = (await conn.execute(select(B.c.created_at, B.c.id).where(B.c.id == anchor, *scope))).first()
        if found is None:
            return None
        key = tuple_(B.c.created_at, B.c.id)
        mark = tuple_(literal(found.created_at, t.UTCDateTime()), literal(found.id, B.c.id.type))
        query = query.where(key > mark if newer else key < mark)
    if newer:
        query = query.order_by(B.c.created_at.asc(), B.c.id.asc())
    else:
        query = query.order_by(B.c.created_at.desc(), B.c.id.desc())
    rows = [dict(r._mapping) for r in await conn.execute(query.limit(limit + 1))]
    more = len(rows) > limit
    rows = rows[:limit]
    return (rows[::-1] if newer else rows), more


_UNSET: Any = object()


async def set_api_state(
    conn: AsyncConnection,
    batch_id: str,
    *,
    api_status: str | None = _UNSET,
    api_data: dict[str, Any] | None = _UNSET,
    only_if_status: str | None = _UNSET,
) -> bool:
    """Set a batch's façade-owned ``api_status`` and/or ``api_data`` (either may be left out; None
    clears it), in the caller's transaction (e.g. a finish hook's). ``only_if_status``: change only
    while ``api_status`` is that value (None: while unset), a compare-and-set. True if the row changed."""
    values: dict[str, Any] = {}
    if api_status is not _UNSET:
        values["api_status"] = api_status
    if api_data is not _UNSET:
        values["api_data"] = api_data if api_data is not None else null()
    if not values:
        raise ValueError("set_api_state needs api_status or api_data")
    query = update(B).where(B.c.id == batch_id)
    if only_if_status is not _UNSET:
        query = query.where(
            B.c.api_status.is_(None) if only_if_status is None else B.c.api_status == only_if_status
        )
    done = await conn.execute(query.values(**values))
    return bool(done.rowcount)


async def get_batch(conn: AsyncConnection, batch_id: str) -> Row | None:
    row = (await conn.execute(select(B).where(B.c.id == batch_id))).first()
    return None if row is None else dict(row._mapping)


async def item_counts(conn: AsyncConnection, batch_ids: Sequence[str]) -> dict[str, dict[str, int]]:
    """``{batch id: {state: count}}`` (only states present) for these batches, in one query whatever
    their size: the final states from ``batch_counters`` (kept by every transaction that makes items
    final), ``running`` from its partial index (at most the workers of every replica), ``available``
    the rest of ``total_items``. Consistent when run in one snapshot (the status view's transaction,
    or the finishing transaction itself)."""
    out: dict[str, dict[str, int]] = {batch_id: {} for batch_id in batch_ids}
    if not batch_ids:
        return out
    # ``running`` per batch by its partial index: a correlated count, at most the workers of every replica.
    running: Any = (
        select(func.count())
        .where(I.c.batch_id == B.c.id, I.c.state == literal_column("'running'"))
        .scalar_subquery()
    )
    if conn.dialect.name == "sqlite":  # else it walks every item of the batch by the primary key
        running = literal_column(_SQLITE_RUNNING)
    rows = await conn.execute(
        select(B.c.id, B.c.total_items, C.c.completed, C.c.discarded, C.c.cancelled, running)
        .select_from(B.outerjoin(C, C.c.batch_id == B.c.id))
        .where(B.c.id.in_(list(batch_ids)))
    )
    for batch_id, total, completed, discarded, cancelled, running_now in rows:
        counts = {
            "running": int(running_now),
            "completed": int(completed or 0),
            "discarded": int(discarded or 0),
            "cancelled": int(cancelled or 0),
        }
        counts["available"] = int(total) - sum(counts.values())
        out[batch_id] = {state: counts[state] for state in ITEM_STATES if counts[state] > 0}
    return out


_SQLITE_RUNNING: Final = (
    "(SELECT count(*) FROM batch_items INDEXED BY ix_batch_items_running"
    " WHERE batch_items.batch_id = batches.id AND batch_items.state = 'running')"
)


async def counted_item_states(conn: AsyncConnection, batch_id: str) -> dict[str, int]:
    """``{state: count}`` by counting the batch's items (one GROUP BY over all of them): what
    :func:`item_counts` must always equal. For checks and tests, never a request's path."""
    rows = await conn.execute(
        select(I.c.state, func.count()).where(I.c.batch_id == batch_id).group_by(I.c.state)
    )
    return {state: int(count) for state, count in rows}


async def has_expired_items(conn: AsyncConnection, batch_id: str) -> bool:
    """Whether the batch's expiry cancelled one of its items (error ``expired: …``, SPEC §14, §15)."""
    found = await conn.execute(
        select(literal(1)).where(I.c.batch_id == batch_id, I.c.error.startswith("expired: ")).limit(1)
    )
    return found.first() is not None


async def failure_errors(conn: AsyncConnection, batch_id: str) -> list[tuple[str, int]]:
    """``[(error text, count)]`` of the batch's discarded items, the commonest texts first."""
    count = func.count().label("n")
    rows = await conn.execute(
        select(I.c.error, count)
        .where(I.c.batch_id == batch_id, I.c.state == literal_column("'discarded'"))
        .group_by(I.c.error)
        .order_by(count.desc(), I.c.error)
        .limit(MAX_ERROR_GROUPS)
    )
    return [(str(error), int(n)) for error, n in rows]


def page_row(row: Row) -> dict[str, Any]:
    """The columns a listing shows (never ``key_hash`` or ``token_claims``: the owner says who)."""
    hidden = ("key_hash", "token_claims", "last_claimed_at")
    return {k: v for k, v in row.items() if k not in hidden}
