"""What the batch API reads from the queue (SPEC §10.2, §10.3): a batch's record, its progress, its results.

What it does. :func:`batch_record` reads one batch row as a :class:`BatchRecord` (the submitter's
attribution as recorded at submit, which the runner, the ownership check and the status view share);
:func:`batch_view` adds the item counts and every item's state; :func:`result_rows` pages through the
items' final states and errors by idx, so the results endpoint can stream a 50 000-item batch page by
page. The writes (submit, claim, finalize, cancel, rescue) are in ``relay.batches.queue``.

What it deliberately does not know. Who may read a batch (the service compares ``owner`` with the
caller), the JSON casing of the status view (the API renders it), and the response bodies
(``relay.batches.payload_store``).

Invariants. Every read costs a constant number of queries, whatever the item count (SPEC §10.2): one
for the record, one GROUP BY for the counts, one for the items. The three read one snapshot (Postgres:
a REPEATABLE READ read-only transaction; SQLite: one read transaction), so ``counts`` always sums to
``len(items)`` even while workers finish items. State literals are written into the SQL, never bound,
so the partial index ``ix_batch_items_available`` stays usable by prepared (generic) plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, NamedTuple

import orjson
from sqlalchemy import ColumnElement, Select, Text, cast, func, literal_column, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.domain.batches import ITEM_STATES, ResponseRef
from relay.store import tables as t

B = t.batches
I = t.batch_items  # noqa: E741  (the item table, next to B)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    """One batch row: what the submitter's credential and policy were at submit (SPEC §10.1).

    The runner re-checks the credential from ``key_hash`` (relay keys) or ``token_claims`` (inference
    tokens), runs every item under ``policy_id`` and names the policy by ``policy_name`` once it is
    deleted; usage events carry the rest of the attribution.
    """

    id: str
    owner: str  # the key's sha256, or "user:<id>" for tokens (§10.2 RelayKeyHash)
    key_hash: str | None
    token_claims: dict[str, Any] | None
    policy_id: str
    policy_name: str
    project_id: str
    team_id: str
    principal_kind: str
    principal_id: str
    credential_kind: str  # "key" | "token"
    credential_id: str
    inbound_shape: str
    status: str  # "queued" | "cancelled"
    total_items: int
    created_at: datetime
    completed_at: datetime | None
    payload_store: str = "files"  # where its bodies are (SPEC §10.7): "files" | "database"
    api: str = "relay"  # the API that created it (§10.10); the runner never looks at it
    expires_at: datetime | None = None
    cancel_requested_at: datetime | None = None  # set by every cancel
    api_status: str | None = None  # façade-owned (e.g. OpenAI's "validating"); the engine only stores it


class ItemState(NamedTuple):
    idx: int
    state: str


class ResultRow(NamedTuple):
    idx: int
    state: str
    error: str | None  # discarded: why; cancelled: "cancelled"; otherwise None
    response: ResponseRef | None  # completed: where its body is (None: a per-item file of old versions)
    custom_id: str | None = None  # the caller's name for the item (§14/§15), None for §10 items
    status: int | None = None  # the upstream's HTTP status when one answered


@dataclass(frozen=True, slots=True)
class BatchView:
    """The status view (SPEC §10.2): the record, ``counts`` (only states present) and every item."""

    record: BatchRecord
    counts: dict[str, int]
    # ``[{"idx": 0, "state": "completed"}, …]`` in idx order, as JSON text built by the database: a
    # 50 000-item view would otherwise cost 50 000 rows through the driver and as many Python objects.
    items_json: str

    @property
    def finished(self) -> bool:
        return self.record.completed_at is not None

    @property
    def items(self) -> list[ItemState]:
        return [ItemState(item["idx"], item["state"]) for item in orjson.loads(self.items_json)]


_RECORD_FIELDS = tuple(f.name for f in fields(BatchRecord))
_RECORD_COLUMNS = tuple(B.c[name] for name in _RECORD_FIELDS)


def record_from_row(row: Mapping[Any, Any]) -> BatchRecord:
    """A :class:`BatchRecord` from a row holding (at least) the ``batches`` columns."""
    return BatchRecord(**{name: row[name] for name in _RECORD_FIELDS})


def in_state(state: str) -> ColumnElement[bool]:
    """``batch_items.state = '<state>'`` with the literal in the SQL text: a partial index whose predicate
    is ``state = 'available'`` matches it, whereas a bound ``state = $1`` defeats a generic plan."""
    if state not in ITEM_STATES:
        raise ValueError(f"unknown item state {state!r}")
    return I.c.state == literal_column(f"'{state}'")


async def read_record(conn: AsyncConnection, batch_id: str) -> BatchRecord | None:
    row = (await conn.execute(select(*_RECORD_COLUMNS).where(B.c.id == batch_id))).first()
    return None if row is None else record_from_row(row._mapping)


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
            counted = await conn.execute(
                select(I.c.state, func.count()).where(I.c.batch_id == batch_id).group_by(I.c.state)
            )
            counts = {state: count for state, count in counted}
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
            )
            for idx, state, error, file, offset, length, custom_id, status in rows
        ]
