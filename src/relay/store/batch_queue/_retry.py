"""The statements of a batch retry (SPEC §17 "Retry"): which items of a finished batch a retry takes, and
the retry batch written from them, server side.

What it does. :func:`count_selected` and :func:`selected_idxs` read which items of the original a
:class:`~relay.domain.batch_retry.RetrySelection` takes (state, and optionally an error prefix), the
latter a page at a time by idx, so a caller copying bodies never holds a whole batch's idxs;
:func:`insert_retry_batch` writes the retry batch in ONE transaction: its row (naming the original
in ``retry_of``), its items by ``INSERT … SELECT`` from the original's (``idx`` renumbered from 0 in
the original's idx order, ``source_idx`` the original idx, ``custom_id`` kept), and, when both
batches keep their bodies in the database, the request bodies too, chunk rows copied by one more
``INSERT … SELECT``: 10 000 bodies cost one statement, not a round trip each, and no body passes
through Relay.

What it deliberately does not know. Who may retry (the service checks the owner and that the batch
is finished), the payload directory (the service copies ``files`` bodies through the payload stores'
read and write API before calling :func:`insert_retry_batch`), HTTP.

Invariants. The original batch is never written. The retry batch is all or nothing: if the items
copied are not exactly the ``total_items`` the caller counted (the original changed under it, e.g.
deleted by retention), nothing is written (:class:`RetryRaced`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, and_, func, insert, literal, literal_column, or_, select, true
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.batch_retry import RetrySelection
from relay.domain.batches import AVAILABLE
from relay.store import tables as t
from relay.store.batch_queue._rows import B, I, in_state
from relay.store.batch_queue._submit import InTransaction, batch_values
from relay.store.batch_queue._txn import write_txn
from relay.store.tables import ID

P = t.payload_chunks
REQUEST = "request"  # payload_chunks.kind of a request body (relay.store.payload_chunks.REQUEST)


class RetryRaced(RuntimeError):
    """The original's selected items changed between counting them and copying them; nothing written."""


def selection(batch_id: str, chosen: RetrySelection) -> ColumnElement[bool]:
    """The original batch's items a retry takes."""
    where = and_(I.c.batch_id == batch_id, or_(*(in_state(state) for state in chosen.states)))
    if chosen.errors is not None:
        where = and_(where, or_(*(I.c.error.startswith(p, autoescape=True) for p in chosen.errors)))
    return where


async def count_selected(engine: AsyncEngine, batch_id: str, chosen: RetrySelection) -> int:
    """How many items of the batch the retry takes (one query)."""
    async with engine.connect() as conn:
        count = await conn.execute(select(func.count()).select_from(I).where(selection(batch_id, chosen)))
        return int(count.scalar_one())


async def selected_idxs(
    engine: AsyncEngine, batch_id: str, chosen: RetrySelection, *, after_idx: int, limit: int
) -> list[int]:
    """Up to ``limit`` idxs the retry takes, above ``after_idx``, ascending (keyset pages)."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(I.c.idx)
            .where(selection(batch_id, chosen), I.c.idx > after_idx)
            .order_by(I.c.idx)
            .limit(limit)
        )
        return list(rows.scalars())


async def insert_retry_batch(
    engine: AsyncEngine,
    row: Mapping[str, Any],
    chosen: RetrySelection,
    total_items: int,
    *,
    copy_request_chunks: bool,
    first: InTransaction | None = None,
) -> None:
    """Write the retry batch ``row`` (its ``retry_of`` names the original) with ``total_items`` items
    copied from the original's selected ones, in one transaction; with ``copy_request_chunks`` the
    original's request bodies in ``payload_chunks`` are copied to it in the same transaction. ``first``
    runs before anything else (the idempotency row). ``IntegrityError`` for a duplicate (nothing
    written); :class:`RetryRaced` when the items found are not ``total_items``."""
    source_id = row["retry_of"]
    if not source_id or total_items < 1:
        raise ValueError("a retry batch names its original and has at least one item")
    values = batch_values(row, total_items)
    batch_id = values["id"]
    async with write_txn(engine) as conn:
        if first is not None:
            await first(conn)
        await conn.execute(insert(B).values(**values))
        source = select(
            literal(batch_id, ID),
            func.row_number().over(order_by=I.c.idx) - 1,
            literal_column(f"'{AVAILABLE}'"),
            I.c.custom_id,
            I.c.idx,
        ).where(selection(source_id, chosen))
        copied = await conn.execute(
            insert(I).from_select(["batch_id", "idx", "state", "custom_id", "source_idx"], source)
        )
        if copied.rowcount != total_items:
            raise RetryRaced(f"expected {total_items} items to retry, found {copied.rowcount}")
        if copy_request_chunks:
            await conn.execute(_copy_chunks(conn.dialect.name, source_id, batch_id, chosen))


def _copy_chunks(dialect: str, source_id: str, batch_id: str, chosen: RetrySelection) -> Any:
    """``INSERT … SELECT`` of the selected items' request chunks under the retry batch, numbered as the
    items are. On Postgres each item's chunks are a LATERAL lookup by primary key: a plain join lets a
    planner that has no statistics yet for a new batch's rows (it guesses one row) compare every item
    with every chunk, 10 000 items then costing 10^8 comparisons (~30 s) instead of 10^4 lookups."""
    picked = (
        select(I.c.idx, (func.row_number().over(order_by=I.c.idx) - 1).label("new_idx"))
        .where(selection(source_id, chosen))
        .subquery("picked")
    )
    request: ColumnElement[str] = literal_column(f"'{REQUEST}'")
    of_item = and_(P.c.owner_id == source_id, P.c.kind == request, P.c.idx == picked.c.idx)
    if dialect == "postgresql":
        # OFFSET 0 keeps the planner from pulling the lateral subquery up into a plain join again.
        lateral = select(P.c.seq, P.c.data).where(of_item).offset(0).lateral("chunk")
        seq, data, joined = lateral.c.seq, lateral.c.data, picked.join(lateral, true())
    else:  # SQLite looks every item's chunks up by primary key on its own
        seq, data, joined = P.c.seq, P.c.data, picked.join(P, of_item)
    rows = select(literal(batch_id, ID), request, picked.c.new_idx, seq, data).select_from(joined)
    return insert(P).from_select(["owner_id", "kind", "idx", "seq", "data"], rows)
