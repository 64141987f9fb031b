"""Reads a batch façade needs beyond the engine's (SPEC §14): summed usage, items' request ids, and the
batches waiting for their files to be written.

What it does. :func:`usage_totals` sums the usage events of the completed items of a page of batches
in one GROUP BY; :func:`request_ids` reads the request ids of a page of one batch's items (their
usage events'); :func:`waiting_to_finalize` lists a façade's batches whose ``api_status`` says they
wait for (or are being given) their output files.

What it deliberately does not know. What a façade renders from these, and its state names beyond
the two it is asked about (``waiting`` and a claim ``prefix``).

Invariants. Every read is one query, whatever the batch's size. A completed item's event is the one
without ``error_kind`` (SPEC §10.8: exactly one event per item).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import BindParameter, String, bindparam, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t

B = t.batches
U = t.usage_events


class UsageTotals(NamedTuple):
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_tokens: int = 0  # events without a reported count add nothing


async def usage_totals(conn: AsyncConnection, batch_ids: Sequence[str]) -> dict[str, UsageTotals]:
    """``{batch id: totals}`` over the completed items' usage events (batches with none: zeros)."""
    out = {batch_id: UsageTotals(0, 0, 0, 0) for batch_id in batch_ids}
    if not batch_ids:
        return out
    rows = await conn.execute(
        select(
            U.c.batch_id,
            func.coalesce(func.sum(U.c.input_tokens), 0),
            func.coalesce(func.sum(U.c.cached_input_tokens), 0),
            func.coalesce(func.sum(U.c.output_tokens), 0),
            func.coalesce(func.sum(U.c.reasoning_tokens), 0),
        )
        .where(U.c.batch_id.in_(list(batch_ids)), U.c.error_kind.is_(None))
        .group_by(U.c.batch_id)
    )
    for batch_id, inputs, cached, outputs, reasoning in rows:
        out[batch_id] = UsageTotals(int(inputs), int(cached), int(outputs), int(reasoning))
    return out


async def request_ids(conn: AsyncConnection, batch_id: str, idxs: Sequence[int]) -> dict[int, str]:
    """``{idx: request id}`` of these items' usage events (items without one are left out)."""
    if not idxs:
        return {}
    rows = await conn.execute(
        select(U.c.batch_idx, U.c.request_id).where(U.c.batch_id == batch_id, U.c.batch_idx.in_(list(idxs)))
    )
    return {int(idx): str(request_id) for idx, request_id in rows}


async def waiting_to_finalize(
    conn: AsyncConnection, api: str, *, waiting: str, prefix: str, limit: int
) -> list[tuple[str, str]]:
    """``[(batch id, api_status)]`` of ``api``'s finished batches whose ``api_status`` is ``waiting``
    or starts with ``prefix`` (a claim), oldest finish first.

    The values are rendered into the statement (not bound): only then can SQLite's planner, which
    matches a partial index's predicate term by term, and Postgres's, which cannot prove a generic
    plan's parameters imply it, use ``ix_batches_finalizing``. So they must be the ones that index was
    built for (``batch_tables.FINALIZE_*``) and ``prefix`` holds no LIKE wildcard."""
    if "%" in prefix or "_" in prefix:
        raise ValueError(f"prefix {prefix!r} holds a LIKE wildcard")
    rows = await conn.execute(
        select(B.c.id, B.c.api_status)
        .where(
            B.c.api == _inline(api),
            B.c.completed_at.is_not(None),
            or_(B.c.api_status == _inline(waiting), B.c.api_status.like(_inline(prefix + "%"))),
        )
        .order_by(B.c.completed_at, B.c.id)
        .limit(limit)
    )
    return [(str(batch_id), str(status)) for batch_id, status in rows]


def _inline(value: str) -> BindParameter[str]:
    return bindparam(None, value, type_=String(), literal_execute=True)
