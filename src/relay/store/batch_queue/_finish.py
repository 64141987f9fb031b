"""Final states of running batch items (SPEC §10.6, §10.8): :func:`finalize_many` settles a group of
items in ONE transaction, each with its usage event, and finishes the batches left with nothing open
(running the finish hooks in that transaction). ``relay.batches.finalizer`` groups the calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import bindparam
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.domain.batch_record import FinalState
from relay.domain.batches import FINAL_STATES, ResponseRef
from relay.store.batch_queue._tally import FinalTally
from relay.store.batch_queue._txn import (
    NO_HOOKS,
    BatchEvent,
    RunsFinishHooks,
    check_events,
    complete_if_done,
    count_and_complete_on_driver,
    db_now,
    lock_batches,
    lock_batches_on_driver,
    write_txn,
)
from relay.store.columns import utc_bind_step
from relay.store.driver import driver_connection, pg_driver
from relay.store.held import Db
from relay.store.usage import insert_events_on_driver


@dataclass(frozen=True, slots=True)
class FinalItem:
    """A running item's final state as its replica decided it, with its one usage event."""

    batch_id: str
    idx: int
    state: FinalState
    status: int | None  # the upstream's HTTP status when one answered
    error: str | None  # required for discarded and cancelled items, refused for completed ones
    event: BatchEvent
    response: ResponseRef | None = None  # a completed item's body in the payload directory


#: Writes the response bodies of the items finalized, inside their transaction (the database store).
SaveResponses = Callable[[AsyncConnection, list[FinalItem]], Awaitable[None]]


async def finalize_many(
    db: Db,
    instance_id: str,
    finals: Sequence[FinalItem],
    save_responses: SaveResponses | None = None,
    hooks: RunsFinishHooks = NO_HOOKS,
) -> set[tuple[str, int]]:
    """Give these running items their final states and write their usage events, all in ONE
    transaction (each item's event commits with its state, SPEC §10.8); returns the (batch_id, idx)
    finalized.

    Only items still ``running`` and claimed by ``instance_id`` change; the others (rescued as
    ``worker lost`` or put back meanwhile) are left out and get no event. Sets ``completed_at`` on the
    batches left with nothing open. A worker pool funnels every finished item through here, so under
    load one transaction settles many items: the per-transaction costs (BEGIN, the write lock on
    SQLite, COMMIT's flush) are paid once per group instead of once per item. ``save_responses`` gets
    the items finalized, in the same transaction, to write what a payload store keeps there.
    """
    if not finals:
        return set()
    for final in finals:
        check_final(final)
    check_events([f.event for f in finals], [(f.batch_id, f.idx) for f in finals])
    keys = sorted({(f.batch_id, f.idx) for f in finals})
    if len(keys) != len(finals):
        raise ValueError("an item appears twice in one finalize")
    async with write_txn(db) as conn:
        if conn.dialect.name == "postgresql":
            return await _finalize_postgres(conn, instance_id, keys, finals, save_responses, hooks)
        mine = await _settle_sqlite(conn, instance_id, finals)
        done = [f for f in finals if (f.batch_id, f.idx) in mine]
        if not done:
            return set()
        await insert_events_on_driver(conn, [f.event for f in done])
        if save_responses is not None:
            await save_responses(conn, done)
        batch_ids = sorted({f.batch_id for f in done})
        await lock_batches(conn, batch_ids)  # nothing on SQLite: BEGIN IMMEDIATE serialises writers
        tally = FinalTally()
        tally.add_all((f.batch_id, f.state) for f in done)
        await tally.write(conn)
        await complete_if_done(conn, batch_ids, hooks)
    return mine


async def _finalize_postgres(
    conn: AsyncConnection,
    instance_id: str,
    keys: list[tuple[str, int]],
    finals: Sequence[FinalItem],
    save_responses: SaveResponses | None,
    hooks: RunsFinishHooks,
) -> set[tuple[str, int]]:
    """:func:`finalize_many`'s transaction on Postgres, its statements as text on the driver
    (``relay.store.driver``: under ``conn``'s transaction), with the locks and in the order of
    :func:`lock_batches`, :meth:`FinalTally.write` and :func:`complete_if_done`: items (locked in key
    order, settled in the same statement), events and rollup, responses, the batches' advisory locks
    (ascending), then counters (batch id order) and the completion check in one statement. Through
    SQLAlchemy's per-execution work these statements cost the process about three times the CPU of the
    item's claim and start (docs/benchmarks.md)."""
    raw = await pg_driver(conn)
    mine = await _settle_postgres(raw, instance_id, keys, finals)
    done = [f for f in finals if (f.batch_id, f.idx) in mine]
    if not done:
        return mine
    await insert_events_on_driver(conn, [f.event for f in done])
    if save_responses is not None:
        await save_responses(conn, done)
    await lock_batches_on_driver(raw, {f.batch_id for f in done})
    tally = FinalTally()
    tally.add_all((f.batch_id, f.state) for f in done)
    await count_and_complete_on_driver(conn, raw, tally.rows(), hooks)
    return mine


def check_final(final: FinalItem) -> None:
    if final.state not in FINAL_STATES:
        raise ValueError(f"{final.state!r} is not a final item state")
    if (final.state == "completed") != (final.error is None):
        raise ValueError("a completed item has no error; a discarded or cancelled item must have one")
    if final.response is not None and final.state != "completed":
        raise ValueError("only a completed item has a response")


# Postgres: per batch of the group, in batch id order (Python's order of the ids: the database's under
# C collation, and under the usual ones for the ids Relay mints, ASCII of one shape), ONE statement
# locks the batch's items still running for the finalizer in key order (the order put back and rescue
# use; rows a concurrent rescue holds are waited for, then seen as no longer running), its idxs as one
# array (an index probe of the batch's running items whatever the group's size, and one prepared
# statement), and gives exactly those their final states, from arrays. The UPDATE joins the locked rows
# on the whole primary key: a unique key probe per row however stale the statistics (a fresh table's:
# the plan is made before autovacuum has analysed it). Joined to the arrays by key instead, such a plan
# hashed them and scanned every item of the table per group. Each locked row finds its values by its
# place in the idx array (``array_position``), not by a join to the arrays unnested: with one row
# estimated for the lock, that join was a nested loop unnesting all seven arrays again per row (64 × 64
# pairs, 1.5 ms of a 4.3 ms settle of 64 items).
_PG_SETTLE: Final = (
    "WITH locked AS (SELECT batch_items.batch_id AS batch_id, batch_items.idx AS idx,"
    " array_position($2::integer[], batch_items.idx) AS at FROM batch_items"
    " WHERE batch_items.batch_id = $1::varchar AND batch_items.idx = ANY($2::integer[])"
    " AND batch_items.state = 'running' AND batch_items.claimed_by = $3::varchar"
    " ORDER BY batch_items.idx FOR UPDATE)"
    " UPDATE batch_items SET state = ($4::varchar[])[locked.at], finished_at = now(),"
    " status = ($5::integer[])[locked.at], error = ($6::text[])[locked.at],"
    " response_file = ($7::varchar[])[locked.at], response_offset = ($8::bigint[])[locked.at],"
    " response_length = ($9::integer[])[locked.at]"
    " FROM locked WHERE batch_items.batch_id = locked.batch_id AND batch_items.idx = locked.idx"
    " RETURNING batch_items.idx"
)


async def _settle_postgres(
    raw: Any, instance_id: str, keys: list[tuple[str, int]], finals: Sequence[FinalItem]
) -> set[tuple[str, int]]:
    """Postgres: give the items still running for ``instance_id`` their final states (``_PG_SETTLE``,
    one statement per batch); returns those it settled."""
    by_key = {(f.batch_id, f.idx): f for f in finals}
    by_batch: dict[str, list[FinalItem]] = {}
    for key in keys:  # sorted: batches in id order, each one's idxs ascending
        by_batch.setdefault(key[0], []).append(by_key[key])
    mine: set[tuple[str, int]] = set()
    for batch_id, group in by_batch.items():
        refs = [f.response for f in group]
        rows = await raw.fetch(
            _PG_SETTLE,
            batch_id,
            [f.idx for f in group],
            instance_id,
            [f.state for f in group],
            [f.status for f in group],
            [f.error for f in group],
            [ref.file if ref else None for ref in refs],
            [ref.offset if ref else None for ref in refs],
            [ref.length if ref else None for ref in refs],
        )
        mine.update((batch_id, row[0]) for row in rows)
    return mine


def final_values(conn: AsyncConnection) -> dict[str, Any]:
    """The columns an item's final state sets, bound per item by :func:`final_params`."""
    return {
        "state": bindparam("b_state"),
        "finished_at": db_now(conn),
        "status": bindparam("b_status"),
        "error": bindparam("b_error"),
        "response_file": bindparam("b_file"),
        "response_offset": bindparam("b_offset"),
        "response_length": bindparam("b_length"),
    }


def final_params(final: FinalItem) -> dict[str, Any]:
    response = final.response
    return {
        "b_idx": final.idx,
        "b_state": final.state,
        "b_status": final.status,
        "b_error": final.error,
        "b_file": response.file if response else None,
        "b_offset": response.offset if response else None,
        "b_length": response.length if response else None,
    }


# SQLite: the whole settle as ONE conditional statement, its text on the driver itself (as the start's,
# ``_claims.start``): one hop to aiosqlite's thread instead of a SELECT and an executemany through
# SQLAlchemy, each several hops that wait for the GIL while the event loop is busy. SQLite's writer
# lock (the write group's transaction, or BEGIN IMMEDIATE) already serialises it with every other
# writer, so there is nothing to lock first: the WHERE re-checks "running, claimed by me" per row.
_SQLITE_SETTLE = (
    "UPDATE batch_items SET state = v.column3, finished_at = ?, status = v.column4, error = v.column5,"
    " response_file = v.column6, response_offset = v.column7, response_length = v.column8"
    " FROM (VALUES {rows}) AS v"
    " WHERE batch_items.batch_id = v.column1 AND batch_items.idx = v.column2"
    " AND batch_items.state = 'running' AND batch_items.claimed_by = ?"
    " RETURNING batch_id, idx"
)
_SQLITE_SETTLE_ROWS = 1000  # items per statement: 8 parameters each, far below SQLite's 32 766


async def _settle_sqlite(
    conn: AsyncConnection, instance_id: str, finals: Sequence[FinalItem]
) -> set[tuple[str, int]]:
    """SQLite: give the items still running for ``instance_id`` their final states (``_SQLITE_SETTLE``);
    returns those it changed."""
    stamp = utc_bind_step(conn.dialect)(datetime.now(UTC))
    raw = await driver_connection(conn)
    mine: set[tuple[str, int]] = set()
    for start in range(0, len(finals), _SQLITE_SETTLE_ROWS):
        chunk = finals[start : start + _SQLITE_SETTLE_ROWS]
        sql = _SQLITE_SETTLE.format(rows=", ".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk)))
        params: list[Any] = [stamp]
        for f in chunk:
            ref = f.response
            params += (f.batch_id, f.idx, f.state, f.status, f.error)
            params += (ref.file, ref.offset, ref.length) if ref else (None, None, None)
        params.append(instance_id)
        rows = await raw.execute_fetchall(sql, params)
        mine.update((row[0], row[1]) for row in rows)
    return mine
