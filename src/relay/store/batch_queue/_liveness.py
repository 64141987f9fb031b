"""Replica liveness for the batch queue (SPEC §10.6): heartbeats, rescue of a dead replica's items,
and putting a stopping replica's unfinished items back.

A replica heartbeats into ``batch_workers`` (claims refresh it too). :func:`rescue` discards items
left ``running`` by a replica whose heartbeat went stale, or that ran past
``RELAY_BATCH_RESCUE_AFTER_S``, with ``worker lost: `` and one usage event each; several replicas may
rescue at once without rescuing an item twice. :func:`put_back` returns a stopping replica's items to
``available`` (or ``cancelled``, when their batch was cancelled meanwhile). The transaction rules and
invariants are those of ``relay.store.batch_queue``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, or_, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.batch_record import BatchRecord, is_expired, stop_error
from relay.domain.batches import AVAILABLE, CANCELLED, RUNNING
from relay.store import tables as t
from relay.store.batch_queue._claims import upsert_worker
from relay.store.batch_queue._rows import B, I, W, in_state, record_from_row
from relay.store.batch_queue._tally import FinalTally
from relay.store.batch_queue._txn import (
    NO_HOOKS,
    BatchEvent,
    RunsFinishHooks,
    check_events,
    complete_if_done,
    db_ago,
    db_now,
    lock_batches,
    write_txn,
)
from relay.store.usage import insert_events


@dataclass(frozen=True, slots=True)
class RescuedItem:
    """An item discarded by :func:`rescue`, with the error it was given (for its usage event)."""

    batch: BatchRecord
    idx: int
    claimed_by: str
    error: str

    @property
    def batch_id(self) -> str:
        return self.batch.id


async def heartbeat(engine: AsyncEngine, instance_id: str) -> None:
    """Record that ``instance_id`` is alive (insert or refresh its ``batch_workers`` row)."""
    async with write_txn(engine) as conn:
        await upsert_worker(conn, instance_id)


async def forget_worker(engine: AsyncEngine, instance_id: str) -> None:
    """Remove the worker row on a clean stop (after :func:`put_back`): anything this replica still had
    running is then rescued at the next :func:`rescue` on any replica, without waiting for staleness."""
    async with write_txn(engine) as conn:
        await conn.execute(delete(W).where(W.c.instance_id == instance_id))


async def expire_workers(engine: AsyncEngine, silent_for_s: float) -> int:
    """Delete the rows of replicas that have not heartbeated for ``silent_for_s`` (the caller passes
    ``RELAY_BATCH_RESCUE_AFTER_S``): a killed replica's row must not stay forever. Safe: by then every
    item it ran has been rescued (its heartbeat was stale long before), a rescue of an item whose
    claimant has no row says the same ``worker lost: `` anyway, and a replica that was only cut off
    from the database recreates its row with its next heartbeat. Returns how many rows went."""
    async with write_txn(engine) as conn:
        done = await conn.execute(delete(W).where(W.c.heartbeat_at < db_ago(conn, silent_for_s)))
        return int(done.rowcount or 0)


async def held_by(engine: AsyncEngine, instance_id: str) -> list[tuple[str, int]]:
    """The items the database says ``instance_id`` is running or has reserved (the running and
    reserved indexes serve it). The pool compares them with the items it knows, to find orphans of a
    claim or a start whose answer it never got."""
    async with engine.connect() as conn:
        held: list[tuple[str, int]] = []
        for state in (RUNNING, AVAILABLE):
            rows = await conn.execute(
                select(I.c.batch_id, I.c.idx).where(in_state(state), I.c.claimed_by == instance_id)
            )
            held.extend((row.batch_id, row.idx) for row in rows)
        return sorted(held)


async def release_lost_reservations(engine: AsyncEngine, *, by: str, stale_after_s: float) -> int:
    """Items reserved (claimed ahead, not started) by a replica whose heartbeat is older than
    ``stale_after_s``, or that has no worker row, become claimable again; returns how many. They were
    never started, so nothing else changes (no event). If that replica is alive after all, its
    :func:`~relay.store.batch_queue._claims.start` of them fails and it drops them. ``by``, the replica
    asking, is alive whatever its own row says (see :func:`rescue`): its reservations stay."""
    async with write_txn(engine) as conn:
        alive = select(W.c.instance_id).where(W.c.heartbeat_at >= db_ago(conn, stale_after_s))
        released = await conn.execute(
            update(I)
            .where(
                in_state(AVAILABLE),
                I.c.claimed_by.is_not(None),
                I.c.claimed_by != by,
                I.c.claimed_by.not_in(alive),
            )
            .values(claimed_by=None, claimed_at=None)
        )
        return int(released.rowcount or 0)


async def open_counts(engine: AsyncEngine) -> dict[str, int]:
    """How many items wait and run in the whole database (for the ``relay_batch_items`` gauge), in one
    snapshot: ``running`` counted on its partial index (at most the workers of every replica);
    ``available`` what the open batches (``ix_batches_open``) hold beyond their final counters
    (``_tally``) and running items: a million waiting items cost a row, not a million index entries."""
    C = t.batch_counters
    finals = sum((func.coalesce(C.c[state], 0) for state in ("completed", "discarded", "cancelled")), 0)
    not_final = (
        select(func.coalesce(func.sum(B.c.total_items - finals), 0))
        .select_from(B.outerjoin(C, C.c.batch_id == B.c.id))
        .where(B.c.completed_at.is_(None))
        .scalar_subquery()
    )
    running = select(func.count()).select_from(I).where(in_state(RUNNING)).scalar_subquery()
    async with engine.connect() as conn:
        row = (await conn.execute(select(not_final, running))).one()
    open_items, running_now = int(row[0]), int(row[1])
    return {AVAILABLE: max(0, open_items - running_now), RUNNING: running_now}


async def rescue(
    engine: AsyncEngine,
    *,
    by: str,
    stale_after_s: float,
    rescue_after_s: float,
    events_for: Callable[[list[RescuedItem]], Sequence[BatchEvent]],
    hooks: RunsFinishHooks = NO_HOOKS,
) -> list[RescuedItem]:
    """Discard running items whose replica is gone, with ``worker lost: `` and one usage event each.

    An item is rescued when its claimant's heartbeat is older than ``stale_after_s`` or the claimant
    has no worker row ("replica <id> stopped before finishing the item"), or when it was claimed more
    than ``rescue_after_s`` ago whatever the heartbeat says (SPEC's latest bound,
    ``RELAY_BATCH_RESCUE_AFTER_S``: a live replica's item timeout fires long before). One transaction;
    safe on several replicas at once (Postgres: rows another rescuer holds are skipped, rows it has
    committed no longer match), so no item is rescued twice. ``events_for`` gets the items in
    (batch_id, idx) order and returns one event per item in that order; if it raises, nothing changes.

    ``by`` is the replica rescuing. It is alive, whatever its own row says: a heartbeat written just
    before, then a long wait (for SQLite's write lock, or a loop stalled under load) makes its own row
    look stale by the time this statement is built, and a replica must never discard its own running
    items as lost (SPEC §10.6: the replica running it died). Its items stay under the latest bound only.
    """
    async with write_txn(engine) as conn:
        now = db_now(conn)
        worker_lost = and_(
            I.c.claimed_by != by,
            or_(W.c.instance_id.is_(None), W.c.heartbeat_at < db_ago(conn, stale_after_s)),
        )
        found = list(
            await conn.execute(
                select(I.c.batch_id, I.c.idx, I.c.claimed_by, worker_lost.label("worker_lost"))
                .select_from(I.outerjoin(W, W.c.instance_id == I.c.claimed_by))
                .where(in_state(RUNNING), or_(worker_lost, I.c.claimed_at < db_ago(conn, rescue_after_s)))
                .with_for_update(of=I, skip_locked=True)
            )
        )
        # Sorted here, not by ORDER BY: SQLite would walk the primary key (every item ever) to avoid a
        # sort, instead of the few rows of the running index. Skipping locked rows cannot deadlock.
        found.sort(key=lambda row: (row.batch_id, row.idx))
        if not found:
            return []
        batch_ids = sorted({row.batch_id for row in found})
        records = {
            row.id: record_from_row(row._mapping)
            for row in await conn.execute(select(B).where(B.c.id.in_(batch_ids)))
        }
        rescued = [
            RescuedItem(records[row.batch_id], row.idx, row.claimed_by, _lost_error(row, rescue_after_s))
            for row in found
        ]
        await conn.execute(
            update(I)
            .where(
                I.c.batch_id == bindparam("b_batch_id"),  # one parameter set per item: executemany
                I.c.idx == bindparam("b_idx"),
                in_state(RUNNING),
            )
            .values(state="discarded", finished_at=now, error=bindparam("b_error")),
            [{"b_batch_id": r.batch_id, "b_idx": r.idx, "b_error": r.error} for r in rescued],
        )
        events = events_for(rescued)
        check_events(events, [(r.batch_id, r.idx) for r in rescued])
        await insert_events(conn, events)
        await lock_batches(conn, batch_ids)
        tally = FinalTally()
        tally.add_all((r.batch_id, "discarded") for r in rescued)
        await tally.write(conn)
        await complete_if_done(conn, batch_ids, hooks)
    return rescued


def _lost_error(row: Any, rescue_after_s: float) -> str:
    if row.worker_lost:
        return f"worker lost: replica {row.claimed_by} stopped before finishing the item"
    return (
        f"worker lost: replica {row.claimed_by} ran longer than RELAY_BATCH_RESCUE_AFTER_S "
        f"({rescue_after_s:g} s)"
    )


async def put_back(
    engine: AsyncEngine,
    instance_id: str,
    items: Sequence[tuple[str, int]],
    *,
    events_for: Callable[[list[tuple[BatchRecord, int]]], Sequence[BatchEvent]],
    hooks: RunsFinishHooks = NO_HOOKS,
) -> int:
    """Graceful stop (SPEC §10.6): return these items to ``available`` if they are still running and
    claimed by ``instance_id``, and release those of them it only reserved; returns how many went back
    (reservations released not counted).

    An item whose batch was cancelled (by another replica) or expired meanwhile does not go back, where
    no one would ever claim it: it becomes ``cancelled`` (error :func:`stop_error`) with the usage
    event ``events_for`` builds for it
    (called with those ``(batch record, idx)`` pairs in (batch_id, idx) order, only when there are any).
    """
    wanted = sorted(set(items))
    if not wanted:
        return 0
    async with write_txn(engine) as conn:
        await conn.execute(
            update(I)
            .where(
                tuple_(I.c.batch_id, I.c.idx).in_(wanted), in_state(AVAILABLE), I.c.claimed_by == instance_id
            )
            .values(claimed_by=None, claimed_at=None)
        )
        # Items first, then the batches' advisory locks: the order finalize and rescue use.
        mine = (
            await conn.execute(
                select(I.c.batch_id, I.c.idx)
                .where(
                    tuple_(I.c.batch_id, I.c.idx).in_(wanted),
                    in_state(RUNNING),
                    I.c.claimed_by == instance_id,
                )
                .order_by(I.c.batch_id, I.c.idx)
                .with_for_update()
            )
        ).all()
        if not mine:
            return 0
        batch_ids = sorted({batch_id for batch_id, _ in mine})
        await lock_batches(conn, batch_ids)
        records = {
            row.id: record_from_row(row._mapping)
            for row in await conn.execute(select(B).where(B.c.id.in_(batch_ids)))
        }
        now = datetime.now(UTC)  # an expired batch's items do not go back either (relay.batches.expiry)
        ended = {b for b, r in records.items() if r.status != "queued" or is_expired(r.expires_at, now)}
        back = [(b, i) for b, i in mine if b not in ended]
        gone = [(b, i) for b, i in mine if b in ended]
        if back:
            await conn.execute(
                update(I)
                .where(tuple_(I.c.batch_id, I.c.idx).in_(back))
                .values(state=AVAILABLE, claimed_by=None, claimed_at=None)
            )
        if gone:
            for batch_id in sorted({b for b, _ in gone}):
                await conn.execute(
                    update(I)
                    .where(tuple_(I.c.batch_id, I.c.idx).in_([key for key in gone if key[0] == batch_id]))
                    .values(state=CANCELLED, finished_at=db_now(conn), error=stop_error(records[batch_id]))
                )
            events = events_for([(records[b], i) for b, i in gone])
            check_events(events, gone)
            await insert_events(conn, events)
            tally = FinalTally()
            tally.add_all((b, CANCELLED) for b, _ in gone)
            await tally.write(conn)
            await complete_if_done(conn, {b for b, _ in gone}, hooks)
    return len(back)
