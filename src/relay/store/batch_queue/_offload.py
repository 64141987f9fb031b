"""Final states of an offloaded batch's items (SPEC §22): the provider ran them, the poller maps each
result line into the item's row — state, status, error, response — with its usage event, in one
transaction per group, and finishes the batch once nothing is open (its finish hooks in that
transaction, exactly as a worker's finalize).

Invariants. Only items still ``available`` and unclaimed change (an offloaded batch's items are never
claimed): mapping a line twice — a poller killed mid-way, two replicas in consecutive rounds — changes
nothing the second time and writes no second event, so no item is lost or charged twice. The advisory
lock comes first, like a cancel's (only available items change).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batches import AVAILABLE
from relay.store.batch_queue._finish import FinalItem, SaveResponses, check_final, final_params, final_values
from relay.store.batch_queue._rows import I, in_state
from relay.store.batch_queue._tally import FinalTally
from relay.store.batch_queue._txn import (
    RunsFinishHooks,
    check_events,
    complete_if_done,
    connection,
    lock_batches,
    write_txn,
)
from relay.store.held import Db
from relay.store.usage import insert_events


async def settle_offloaded(
    db: Db,
    batch_id: str,
    finals: Sequence[FinalItem],
    save_responses: SaveResponses | None,
    hooks: RunsFinishHooks,
) -> list[FinalItem]:
    """Give these items of one offloaded batch their final states and events in ONE transaction;
    returns the ones that changed (those still available). ``finals`` empty: only finish the batch
    when nothing is open."""
    for final in finals:
        check_final(final)
        if final.batch_id != batch_id:
            raise ValueError("one batch per settle")
    check_events([f.event for f in finals], [(f.batch_id, f.idx) for f in finals])
    async with write_txn(db) as conn:
        await lock_batches(conn, [batch_id])
        done = await _available(conn, batch_id, finals)
        if done:
            await conn.execute(
                update(I)
                .where(I.c.batch_id == batch_id, I.c.idx == bindparam("b_idx"), in_state(AVAILABLE))
                .values(final_values(conn)),
                [final_params(f) for f in done],
            )
            await insert_events(conn, [f.event for f in done])
            if save_responses is not None:
                await save_responses(conn, done)
            tally = FinalTally()
            tally.add_all((f.batch_id, f.state) for f in done)
            await tally.write(conn)
        await complete_if_done(conn, [batch_id], hooks)
    return done


async def _available(conn: AsyncConnection, batch_id: str, finals: Sequence[FinalItem]) -> list[FinalItem]:
    """The ``finals`` whose items are still available (locked on Postgres until the commit)."""
    if not finals:
        return []
    query = (
        select(I.c.idx)
        .where(I.c.batch_id == batch_id, I.c.idx.in_([f.idx for f in finals]), in_state(AVAILABLE))
        .order_by(I.c.idx)
    )
    if conn.dialect.name != "sqlite":
        query = query.with_for_update()
    still = set((await conn.execute(query)).scalars())
    return [f for f in finals if f.idx in still]


async def open_idxs(db: Db, batch_id: str, *, after_idx: int, limit: int) -> list[int]:
    """A page of the batch's items still available, ascending (what a provider never answered)."""
    async with connection(db) as conn:
        rows = await conn.execute(
            select(I.c.idx)
            .where(I.c.batch_id == batch_id, in_state(AVAILABLE), I.c.idx > after_idx)
            .order_by(I.c.idx)
            .limit(limit)
        )
        return list(rows.scalars())
