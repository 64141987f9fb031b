"""The durable batch queue (SPEC §10.6): submit, claim, finalize, cancel, heartbeats, rescue, put back.

What it does. Every state change of a batch item is one short transaction here, on SQLite and Postgres
alike: :func:`insert_batch` writes a batch and all its items (all or nothing); :func:`claim` reserves up
to ``limit`` available items of ONE batch for a replica (they stay ``available``: SPEC §10.2);
``relay.batches.starter.start`` makes reserved items ``running`` when a worker takes them (no
transaction is held while an item runs); :func:`finalize_many` gives running items their final states
with their usage events; :func:`cancel` cancels a batch's available items with their events. Replica
liveness (heartbeats, rescue, put back) is in ``relay.batches.recovery``, expiry in
``relay.batches.expiry``, the reads in ``relay.batches.views``, and the transaction primitives below
(write transactions, the clock, advisory locks, the completion check that runs the finish hooks) in
``relay.batches.txn``.

What it deliberately does not know. What an item is or how it runs (``relay.batches.runner``), how
usage events are built (callers pass them, or a callback that builds them for the idxs this module
decides on), time budgets (callers pass ``stale_after_s`` / ``rescue_after_s`` from Settings).

Fair order (SPEC §10.6). A claim serves one batch: among queued batches with available items, the one
served least recently (never-served first, then the oldest), and takes its lowest available idxs. Each
claim stamps the batch's ``last_claimed_at``, so batches take turns: a small batch submitted after a
large one is served by the next claim, and items of one batch start in idx order.

Invariants.
* No item is claimed twice: Postgres claims with ``FOR UPDATE SKIP LOCKED`` (the batch row, then the
  item rows), so concurrent claimants take different batches or different items; SQLite runs every
  write transaction here as ``BEGIN IMMEDIATE``, which serialises writers across processes. A claim
  only reserves (``claimed_by``/``claimed_at`` on an ``available`` item); an item runs only after
  ``starter.start`` moved it from ``available`` reserved by this replica to ``running``, so a cancel that
  committed first (it cancels every ``available`` item, reserved or not) means it never starts.
* An item is final at most once, and its usage event is written in the same transaction as its final
  state (SPEC §10.8): every final transition is conditional on the item still being ``running`` (or
  ``available``, for cancel), and the database's unique index refuses a second event for an item.
* ``completed_at`` is set by the transaction that leaves a batch nothing available or running. On
  Postgres (READ COMMITTED, its default; this module relies on it) concurrent finishers of one batch
  would each see the other's item still running, so every transaction that finishes items first
  updates its items, then takes a transaction-level advisory lock per batch, then checks: whichever
  checks second sees the other's commit. Lock order is items → advisory lock → batch row everywhere
  (cancel takes the advisory lock first but touches only available items, which only a start, a
  single statement holding no other lock, also locks), and claims never wait. Should a start and a
  cancel still lock one batch's rows in different orders, Postgres fails one: a start is retried by
  its caller, a cancel here.
* Liveness uses one clock: on Postgres every timestamp this module compares (``claimed_at``,
  ``heartbeat_at``) is the database's ``now()``, so replicas' clock skew cannot rescue a live item.
  On SQLite (one host) it is the process clock.
* State literals are written into the SQL, never bound (see ``views.in_state``): the partial indexes
  ``ix_batch_items_available`` and ``ix_batch_items_running`` then serve the claim, completion and
  rescue queries, even from a prepared statement's generic plan.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

from sqlalchemy import (
    ColumnElement,
    Integer,
    bindparam,
    exists,
    func,
    insert,
    literal,
    literal_column,
    null,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.held import Db
from relay.batches.hooks import NO_HOOKS, FinishHooks
from relay.batches.txn import (  # noqa: F401  (recovery and expiry import them from here)
    _ago,
    _check_events,
    _complete_if_done,
    _item_in,
    _lock_batches,
    _now,
    _write,
    is_expired,
)
from relay.batches.views import B, BatchRecord, I, in_state, record_from_row
from relay.domain.batches import AVAILABLE, CANCELLED, FINAL_STATES, RUNNING, ResponseRef
from relay.store import tables as t
from relay.store.engine import is_transient
from relay.store.tables import ID, UTCDateTime
from relay.store.usage import insert_events
from relay.usage.event import UsageEvent

W = t.batch_workers
FinalState = Literal["completed", "discarded", "cancelled"]
CANCELLED_ERROR: Final = "cancelled"  # SPEC §10.3: a cancelled item carries "error": "cancelled"


@dataclass(frozen=True, slots=True)
class ClaimedItem:
    """An item this replica now runs. Items of one claim share one :class:`BatchRecord` instance."""

    batch: BatchRecord
    idx: int

    @property
    def batch_id(self) -> str:
        return self.batch.id


def _unreserved_in(batch_id: Any) -> ColumnElement[bool]:
    """The batch has an available item no replica has reserved (``ix_batch_items_unreserved``)."""
    return exists().where(I.c.batch_id == batch_id, in_state(AVAILABLE), I.c.claimed_by.is_(None))


def _check_final(final: FinalItem) -> None:
    if final.state not in FINAL_STATES:
        raise ValueError(f"{final.state!r} is not a final item state")
    if (final.state == "completed") != (final.error is None):
        raise ValueError("a completed item has no error; a discarded or cancelled item must have one")
    if final.response is not None and final.state != "completed":
        raise ValueError("only a completed item has a response")


# ---------------------------------------------------------------------------------------------- submit


#: Writes something in the submit's own transaction, before the batch (e.g. the idempotency row).
InTransaction = Callable[[AsyncConnection], Awaitable[None]]


async def insert_batch(
    engine: AsyncEngine,
    row: Mapping[str, Any],
    total_items: int,
    *,
    custom_ids: Sequence[str | None] | None = None,
    first: InTransaction | None = None,
    hooks: FinishHooks = NO_HOOKS,
) -> None:
    """Write the batch row and its ``total_items`` items (all ``available``) in one transaction.

    ``row`` holds the ``batches`` columns the service decided: ``id`` (``mint_batch_id``),
    ``created_at``, ``owner``, ``key_hash`` or ``token_claims``, ``policy_id``, ``policy_name`` and the
    rest of the attribution, ``inbound_shape``, and for the other APIs ``api``, ``expires_at``,
    ``api_status``, ``api_data``. ``status``, ``total_items``, ``completed_at`` and ``last_claimed_at``
    are set here. Without ``custom_ids`` the items are generated by the database in one statement
    (Postgres ``generate_series``; SQLite a recursive CTE), so 50 000 items cost one round trip; with
    them (one per item) they are inserted as one multi-row statement. A batch of another API may have
    no items (an OpenAI batch that failed validation): it is finished at once, finish hooks included.
    ``first`` runs in the same transaction before anything else (the idempotency row: a concurrent
    duplicate then fails here, before writing 50 000 items). Raises ``IntegrityError`` (nothing
    written) for a duplicate id, a duplicate idempotency row or a row the CHECKs refuse.
    """
    api = row.get("api", "relay")
    if total_items < 1 and not (total_items == 0 and api != "relay"):
        raise ValueError("a batch has at least one item")
    if custom_ids is not None and len(custom_ids) != total_items:
        raise ValueError(f"{len(custom_ids)} custom ids for {total_items} items")
    values = {**row, "status": "queued", "total_items": total_items}
    values["completed_at"] = values["last_claimed_at"] = None
    for nullable_json in ("token_claims", "api_data"):
        if values.get(nullable_json) is None:
            values[nullable_json] = null()  # SQL NULL, not the JSON value null (the CHECK tells them apart)
    batch_id = values["id"]
    async with _write(engine) as conn:
        if first is not None:
            await first(conn)
        await conn.execute(insert(B).values(**values))
        if total_items == 0:
            await _complete_if_done(conn, [batch_id], hooks)
            return
        if custom_ids is not None:
            await conn.execute(
                insert(I),
                [
                    {"batch_id": batch_id, "idx": idx, "state": AVAILABLE, "custom_id": custom_id}
                    for idx, custom_id in enumerate(custom_ids)
                ],
            )
            return
        if conn.dialect.name == "postgresql":
            idx = func.generate_series(0, total_items - 1).column_valued("idx")
            source = select(literal(batch_id, ID), idx, literal_column(f"'{AVAILABLE}'"))
        else:
            seq = select(literal(0).label("idx")).cte("seq", recursive=True)
            seq = seq.union_all(select(seq.c.idx + 1).where(seq.c.idx + 1 < total_items))
            source = select(literal(batch_id, ID), seq.c.idx, literal_column(f"'{AVAILABLE}'"))
        await conn.execute(insert(I).from_select(["batch_id", "idx", "state"], source))


# ---------------------------------------------------------------------------------------------- claim


@dataclass(frozen=True, slots=True)
class _ClaimSQL:
    """The claim's statements, built once per dialect: a claim runs many times a second under load,
    and building and cache-keying fresh statement objects each time cost more than executing them."""

    pick: Any
    take: Any
    stamp: Any
    heartbeat: Any


_CLAIM_SQL: dict[str, _ClaimSQL] = {}


def _claim_sql(dialect: str) -> _ClaimSQL:
    built = _CLAIM_SQL.get(dialect)
    if built is not None:
        return built
    # Postgres: the database's clock (one for every replica); SQLite: the process clock, bound per call.
    now = (
        func.now(type_=UTCDateTime()) if dialect == "postgresql" else bindparam("c_now", type_=UTCDateTime())
    )
    batch_id = bindparam("c_batch", type_=ID)
    pick = (
        select(B)
        .where(
            B.c.completed_at.is_(None),
            B.c.status == literal_column("'queued'"),
            or_(B.c.expires_at.is_(None), B.c.expires_at > now),  # an expired batch starts nothing (§14)
            _unreserved_in(B.c.id),
        )
        .order_by(B.c.last_claimed_at.asc().nulls_first(), B.c.created_at, B.c.id)
        .limit(1)
        .with_for_update(skip_locked=True, key_share=True)
    )
    # A CTE, not a plain IN (subquery): Postgres evaluates a locking CTE exactly once, whereas a
    # subquery it rescans per outer row skips the rows this very UPDATE already changed and so hands
    # out the next ones, ignoring the LIMIT. The rows it returns are locked by us and were re-checked as
    # available when locked, so the UPDATE joins them by primary key and does not repeat the state test
    # (which would tempt the planner to walk the whole available index).
    chosen = (
        select(I.c.idx)
        .where(I.c.batch_id == batch_id, in_state(AVAILABLE), I.c.claimed_by.is_(None))
        .order_by(I.c.idx)
        .limit(bindparam("c_limit", type_=Integer))
        .with_for_update(skip_locked=True, key_share=True)
        .cte("chosen")
    )
    take = (
        update(I)
        .where(I.c.batch_id == batch_id, I.c.idx == chosen.c.idx)  # UPDATE … FROM chosen
        .values(claimed_by=bindparam("c_instance", type_=ID), claimed_at=now)  # reserved, still available
        .returning(I.c.idx)
    )
    stamp = update(B).where(B.c.id == batch_id).values(last_claimed_at=now)
    values = {"instance_id": bindparam("c_instance", type_=ID), "started_at": now, "heartbeat_at": now}
    upsert = pg_insert(W) if dialect == "postgresql" else sqlite_insert(W)
    heartbeat = upsert.values(**values).on_conflict_do_update(
        index_elements=[W.c.instance_id], set_={"heartbeat_at": now}
    )
    built = _CLAIM_SQL[dialect] = _ClaimSQL(pick, take, stamp, heartbeat)
    return built


async def claim(db: Db, instance_id: str, limit: int) -> list[ClaimedItem]:
    """Reserve up to ``limit`` available items of one batch (fair order, module docstring) for
    ``instance_id`` (committed when this returns). Reserved items stay ``available`` — a cancel on any
    replica cancels them like any waiting item (SPEC §10.2) — and ``starter.start`` makes them ``running``
    when a worker takes them. ``[]`` when nothing is available unreserved (or, on Postgres, every such
    batch is being claimed by another replica right now).

    The claimant's heartbeat is refreshed in the same transaction, so an item is never claimed by a
    replica without a worker row (which :func:`rescue` would take for a dead replica).
    """
    if limit < 1:
        return []
    async with _write(db) as conn:
        sql = _claim_sql(conn.dialect.name)
        params: dict[str, Any] = {"c_instance": instance_id, "c_limit": limit}
        if conn.dialect.name != "postgresql":
            params["c_now"] = datetime.now(UTC)
        picked = (await conn.execute(sql.pick, {k: v for k, v in params.items() if k == "c_now"})).first()
        if picked is None:
            return []
        batch = record_from_row(picked._mapping)
        params["c_batch"] = batch.id
        idxs = sorted((await conn.execute(sql.take, params)).scalars())
        if not idxs:
            return []
        await conn.execute(sql.stamp, params)
        await conn.execute(sql.heartbeat, params)
    return [ClaimedItem(batch, idx) for idx in idxs]


# ---------------------------------------------------------------------------------------------- finish


@dataclass(frozen=True, slots=True)
class FinalItem:
    """A running item's final state as its replica decided it, with its one usage event."""

    batch_id: str
    idx: int
    state: FinalState
    status: int | None  # the upstream's HTTP status when one answered
    error: str | None  # required for discarded and cancelled items, refused for completed ones
    event: UsageEvent
    response: ResponseRef | None = None  # a completed item's body in the payload directory


#: Writes the response bodies of the items finalized, inside their transaction (the database store).
SaveResponses = Callable[[AsyncConnection, list[FinalItem]], Awaitable[None]]


async def finalize_many(
    db: Db,
    instance_id: str,
    finals: Sequence[FinalItem],
    save_responses: SaveResponses | None = None,
    hooks: FinishHooks = NO_HOOKS,
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
        _check_final(final)
    _check_events([f.event for f in finals], [(f.batch_id, f.idx) for f in finals])
    keys = sorted({(f.batch_id, f.idx) for f in finals})
    if len(keys) != len(finals):
        raise ValueError("an item appears twice in one finalize")
    async with _write(db) as conn:
        # Items first (locked in key order), then the batches' advisory locks: the order put back and
        # rescue use. Rows locked by a concurrent rescue are waited for, then seen as no longer running.
        rows = await conn.execute(
            select(I.c.batch_id, I.c.idx)
            .where(tuple_(I.c.batch_id, I.c.idx).in_(keys), in_state(RUNNING), I.c.claimed_by == instance_id)
            .order_by(I.c.batch_id, I.c.idx)
            .with_for_update()
        )
        mine = {(row.batch_id, row.idx) for row in rows}
        done = [f for f in finals if (f.batch_id, f.idx) in mine]
        if not done:
            return set()
        await conn.execute(
            update(I)
            .where(I.c.batch_id == bindparam("b_batch_id"), I.c.idx == bindparam("b_idx"))
            .values(
                state=bindparam("b_state"),
                finished_at=_now(conn),
                status=bindparam("b_status"),
                error=bindparam("b_error"),
                response_file=bindparam("b_file"),
                response_offset=bindparam("b_offset"),
                response_length=bindparam("b_length"),
            ),
            [
                {
                    "b_batch_id": f.batch_id,
                    "b_idx": f.idx,
                    "b_state": f.state,
                    "b_status": f.status,
                    "b_error": f.error,
                    "b_file": f.response.file if f.response else None,
                    "b_offset": f.response.offset if f.response else None,
                    "b_length": f.response.length if f.response else None,
                }
                for f in done
            ],
        )
        await insert_events(conn, [f.event.to_row() for f in done])
        if save_responses is not None:
            await save_responses(conn, done)
        batch_ids = sorted({f.batch_id for f in done})
        await _lock_batches(conn, batch_ids)
        await _complete_if_done(conn, batch_ids, hooks)
    return mine


async def cancel(
    engine: AsyncEngine,
    batch_id: str,
    *,
    events_for: Callable[[list[int]], list[UsageEvent]],
    hooks: FinishHooks = NO_HOOKS,
) -> list[int]:
    """Cancel a batch (SPEC §10.5): its status becomes ``cancelled`` and every ``available`` item —
    reserved by a replica or not: no one ran it, so its reservation goes — becomes ``cancelled`` (error
    ``"cancelled"``) with one usage event each, built by ``events_for(idxs)`` (one
    event per idx, in the order given), all in one transaction; returns the idxs cancelled, ascending.

    Idempotent: a second call cancels nothing and writes no event. Running items are left alone (the
    replica running them decides: it stops them and finalizes them ``cancelled``, or lets them finish).
    ``completed_at`` is set when nothing is running. An unknown batch id cancels nothing (``[]``); the
    service answers 404 before calling this. If ``events_for`` raises, nothing is cancelled.
    """
    for attempt in range(3):
        try:
            return await _cancel(engine, batch_id, events_for, hooks)
        except DBAPIError as exc:
            if attempt == 2 or not is_transient(exc):
                raise
    raise AssertionError("unreachable")


async def _cancel(
    engine: AsyncEngine,
    batch_id: str,
    events_for: Callable[[list[int]], list[UsageEvent]],
    hooks: FinishHooks,
) -> list[int]:
    async with _write(engine) as conn:
        # Advisory lock first: cancel changes only available items, which no finisher holds.
        await _lock_batches(conn, [batch_id])
        await conn.execute(
            update(B)
            .where(B.c.id == batch_id, B.c.status == literal_column("'queued'"))
            .values(status="cancelled", cancel_requested_at=_now(conn))
        )
        cancelled = await conn.execute(
            update(I)
            .where(I.c.batch_id == batch_id, in_state(AVAILABLE))  # reserved ones too (SPEC §10.2)
            .values(
                state=CANCELLED,
                finished_at=_now(conn),
                error=CANCELLED_ERROR,
                claimed_by=None,
                claimed_at=None,
            )
            .returning(I.c.idx)
        )
        idxs = sorted(cancelled.scalars())
        if idxs:
            events = events_for(idxs)
            _check_events(events, [(batch_id, idx) for idx in idxs])
            await insert_events(conn, [event.to_row() for event in events])
        await _complete_if_done(conn, [batch_id], hooks)
    return idxs


# ---------------------------------------------------------------------------------------------- liveness


async def _upsert_worker(conn: AsyncConnection, instance_id: str) -> None:
    """Insert or refresh this replica's worker row (the claim's own heartbeat statement)."""
    params: dict[str, Any] = {"c_instance": instance_id}
    if conn.dialect.name != "postgresql":
        params["c_now"] = datetime.now(UTC)
    await conn.execute(_claim_sql(conn.dialect.name).heartbeat, params)
