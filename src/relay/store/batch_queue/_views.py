"""What the batch API reads from the queue (SPEC §10.2, §10.3): a batch's record, its progress, its results.

What it does. :func:`batch_record` reads one batch row as a :class:`BatchRecord` (the submitter's
attribution as recorded at submit, which the runner, the ownership check and the status view share);
:func:`batch_view` adds the item counts and every item's state; :func:`result_rows` pages through the
items' final states and errors by idx, so the results endpoint can stream a 50 000-item batch page by
page.

What it deliberately does not know. Who may read a batch (the service compares ``owner`` with the
caller), the JSON casing of the status view (the API renders it), and the response bodies
(``relay.store.payload_chunks``).

Invariants. Every read costs a constant number of queries, whatever the item count (SPEC §10.2): one
for the record, one for the counts (the batch's final-state counters, ``_tally``, and its running
items from their partial index: never a walk over its items), one for the items. They read one
snapshot (Postgres: a REPEATABLE READ read-only transaction; SQLite: one read transaction), so
``counts`` always sums to ``len(items)`` even while workers finish items. State literals are written
into the SQL, never bound, so the partial indexes stay usable by prepared (generic) plans.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, Text, cast, func, literal_column, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.batch_record import BatchRecord, BatchView, ResultRow
from relay.domain.batches import ITEM_STATES, ResponseRef
from relay.store.batch_queue._rows import I, read_record
from relay.store.batches import item_counts


async def batch_record(engine: AsyncEngine, batch_id: str) -> BatchRecord | None:
    """The batch, or None when there is no such batch. One query."""
    async with engine.connect() as conn:
        return await read_record(conn, batch_id)


async def batch_view(
    engine: AsyncEngine, batch_id: str, owner: str | None = None, *, items: bool = True
) -> BatchView | None:
    """The status view of SPEC §10.2, or None when there is no such batch (or, given ``owner``, when
    someone else owns it: decided after the first query, so a foreign batch costs what an unknown id
    does, SPEC §10.8). Three queries, one snapshot.
    ``items=False`` skips the item list (``items_json`` is ``"[]"``): a poller that wants only the
    counts reads a few hundred bytes, not ~35 bytes per item."""
    async with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn = await conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        async with conn.begin():
            record = await read_record(conn, batch_id)
            if record is None or (owner is not None and record.owner != owner):
                return None
            counts = (await item_counts(conn, [batch_id]))[batch_id]  # counters: no walk over items
            items_json = None
            if items:
                items_json = (await conn.execute(_items_json(conn.dialect.name, batch_id))).scalar_one()
    # Present states in the SPEC's order (available → cancelled), whatever order GROUP BY returned.
    ordered = {state: counts[state] for state in ITEM_STATES if state in counts}
    return BatchView(record=record, counts=ordered, items_json=items_json or "[]")


def _items_json(dialect: str, batch_id: str) -> Select[Any]:
    """One row: the batch's items as a JSON array of ``{"idx", "state"}`` in idx order. Postgres orders
    inside the aggregate; SQLite (no ORDER BY in aggregates before 3.44) feeds the aggregate from an
    ordered subquery, which it never flattens into an aggregate query, so the order holds."""
    if dialect == "postgresql":
        item = func.json_build_object(literal_column("'idx'"), I.c.idx, literal_column("'state'"), I.c.state)
        # Cast to text: the driver would otherwise decode the JSON into Python objects.
        return select(cast(func.json_agg(aggregate_order_by(item, I.c.idx)), Text)).where(
            I.c.batch_id == batch_id
        )
    ordered = select(I.c.idx, I.c.state).where(I.c.batch_id == batch_id).order_by(I.c.idx).subquery()
    item = func.json_object(
        literal_column("'idx'"), ordered.c.idx, literal_column("'state'"), ordered.c.state
    )
    return select(func.json_group_array(item, type_=Text))


async def result_rows(engine: AsyncEngine, batch_id: str, *, after_idx: int, limit: int) -> list[ResultRow]:
    """Up to ``limit`` items with ``idx > after_idx``, in idx order (keyset pagination: start with
    ``after_idx=-1``, continue from the last idx returned, stop on a short page). One query per page."""
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(
                I.c.idx,
                I.c.state,
                I.c.error,
                I.c.response_file,
                I.c.response_offset,
                I.c.response_length,
                I.c.custom_id,
                I.c.status,
                I.c.source_idx,
            )
            .where(I.c.batch_id == batch_id, I.c.idx > after_idx)
            .order_by(I.c.idx)
            .limit(limit)
        )
        return [
            ResultRow(
                idx,
                state,
                error,
                ResponseRef(file, offset, length) if file is not None else None,
                custom_id,
                status,
                source_idx,
            )
            for idx, state, error, file, offset, length, custom_id, status, source_idx in rows
        ]
