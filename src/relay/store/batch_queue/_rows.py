"""The batch queue's tables and row helpers: ``B``/``I``/``W``/``T``, the state predicate every query
uses, and the one mapping of a ``batches`` row to a :class:`~relay.domain.batch_record.BatchRecord`.

Why one place. Every statement of the queue filters on an item state written as a literal (so partial
indexes serve prepared statements too) and every read builds the same record: done twice, they drift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from sqlalchemy import ColumnElement, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batch_record import BatchRecord
from relay.domain.batches import ITEM_STATES
from relay.store import tables as t

B = t.batches
I = t.batch_items  # noqa: E741  (the item table, next to B)
W = t.batch_workers
T = t.batch_project_turns  # when a claim last served each project (fair share, SPEC §17)

RECORD_FIELDS = tuple(f.name for f in fields(BatchRecord))
_RECORD_COLUMNS = tuple(B.c[name] for name in RECORD_FIELDS)


def record_from_row(row: Mapping[Any, Any]) -> BatchRecord:
    """A :class:`BatchRecord` from a row holding (at least) the ``batches`` columns."""
    return BatchRecord(**{name: row[name] for name in RECORD_FIELDS})


def in_state(state: str) -> ColumnElement[bool]:
    """``batch_items.state = '<state>'`` with the literal in the SQL text: a partial index whose predicate
    is ``state = 'available'`` matches it, whereas a bound ``state = $1`` defeats a generic plan."""
    if state not in ITEM_STATES:
        raise ValueError(f"unknown item state {state!r}")
    return I.c.state == literal_column(f"'{state}'")


async def read_record(conn: AsyncConnection, batch_id: str) -> BatchRecord | None:
    row = (await conn.execute(select(*_RECORD_COLUMNS).where(B.c.id == batch_id))).first()
    return None if row is None else record_from_row(row._mapping)
