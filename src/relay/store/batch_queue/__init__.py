"""The durable batch queue (SPEC §10.6): every SQL statement about batches and their items, behind ONE
object, :class:`BatchStore` (the way procrastinate's ``JobManager`` owns its queries).

What it does. Every state change of a batch item is one short transaction here, on SQLite and Postgres
alike: :meth:`~BatchStore.insert_batch` writes a batch and all its items (all or nothing);
:meth:`~BatchStore.claim` reserves up to ``limit`` available items of ONE batch for a replica (they
stay ``available``: SPEC §10.2); :meth:`~BatchStore.start` makes reserved items ``running`` when a
worker takes them (no transaction is held while an item runs); :meth:`~BatchStore.finalize_many`
gives running items their final states with their usage events; :meth:`~BatchStore.cancel` cancels a
batch's available items with their events. Replica liveness (heartbeats, rescue, put back, release),
the expiry's statements and the reads (record, status view, result rows) are methods too. The private
modules hold the statements: ``_submit`` (insert, cancel), ``_retry`` (a retry batch, SPEC §17),
``_claims`` (claim, start, the worker row), ``_finish`` (finalize), ``_liveness`` (heartbeats, rescue,
put back), ``_expiry``, ``_views`` (reads), ``_rows`` (tables, the record mapping) and ``_txn`` (write
transactions, the clock, advisory locks, and the completion check that runs the finish hooks inside
the finishing transaction).

What it deliberately does not know. What an item is or how it runs (``relay.batches.runner``), how
usage events are built (callers pass them, or a callback that builds them for the idxs this module
decides on), time budgets (callers pass ``stale_after_s`` / ``rescue_after_s`` from Settings), which
finish hooks there are (the store is built with ``relay.batches.hooks.FinishHooks``, and calls them),
and the grouping loops that batch many calls into one statement (``relay.batches.starter``,
``relay.batches.finalizer``). The façades' own rows (§14, §15) are in ``relay.store.facade_batches``
and ``relay.store.message_batches``.

Fair order (SPEC §10.6, §17's fair share). A claim serves one batch: among queued batches with
unreserved available items, one of the project served least recently (``batch_project_turns``; a
project never served first), and of that project's batches the one served least recently (never-served
first, then the oldest); it takes the batch's lowest available idxs. Each claim stamps the project's
turn and the batch's ``last_claimed_at``, so projects take turns, then their batches: with P projects
waiting each one's next claim comes within P claims, a small batch submitted after a large one is
served within a claim or two, and items of one batch start in idx order. The pick costs one index
probe per open batch, never a walk over items (``_claims._has_unreserved``).

Invariants.
* No item is claimed twice: Postgres claims with ``FOR UPDATE SKIP LOCKED`` (the batch row, then the
  item rows), so concurrent claimants take different batches or different items; SQLite runs every
  write transaction here as ``BEGIN IMMEDIATE``, which serialises writers across processes. A claim
  only reserves (``claimed_by``/``claimed_at`` on an ``available`` item); an item runs only after
  :meth:`~BatchStore.start` moved it from ``available`` reserved by this replica to ``running``, so a
  cancel that committed first (it cancels every ``available`` item, reserved or not) means it never
  starts.
* An item is final at most once, and its usage event is written in the same transaction as its final
  state (SPEC §10.8): every final transition is conditional on the item still being ``running`` (or
  ``available``, for cancel), and the database's unique index refuses a second event for an item.
* ``completed_at`` is set by the transaction that leaves a batch nothing available or running. On
  Postgres (READ COMMITTED, its default; this package relies on it) concurrent finishers of one batch
  would each see the other's item still running, so every transaction that finishes items first
  updates its items, then takes a transaction-level advisory lock per batch, then checks: whichever
  checks second sees the other's commit. Lock order is items → advisory lock → batch row everywhere
  (cancel takes the advisory lock first but touches only available items, which only a start, a
  single statement holding no other lock, also locks), and claims wait only for each other, on their
project's turn row (the last statement of a claim). Should a start and a
  cancel still lock one batch's rows in different orders, Postgres fails one: a start is retried by
  its caller, a cancel here.
* Liveness uses one clock: on Postgres every timestamp this package compares (``claimed_at``,
  ``heartbeat_at``) is the database's ``now()``, so replicas' clock skew cannot rescue a live item.
  On SQLite (one host) it is the process clock.
* State literals are written into the SQL, never bound (``_rows.in_state``): the partial indexes
  ``ix_batch_items_available`` and ``ix_batch_items_running`` then serve the claim, completion and
  rescue queries, even from a prepared statement's generic plan.
* The store holds no state of its own beyond the engine and the hooks: building one is free, and
  several (one per runtime, or per simulated replica in tests) never share anything.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.domain.batch_record import BatchRecord, BatchView, ResultRow
from relay.domain.batch_retry import RetrySelection
from relay.store import batches as admin_reads
from relay.store.batch_queue import _claims, _expiry, _finish, _liveness, _offload, _retry, _submit, _views
from relay.store.batch_queue._claims import ClaimedItem
from relay.store.batch_queue._expiry import ExpiryEvents
from relay.store.batch_queue._finish import FinalItem, SaveResponses
from relay.store.batch_queue._liveness import RescuedItem
from relay.store.batch_queue._retry import RetryRaced
from relay.store.batch_queue._rows import record_from_row
from relay.store.batch_queue._submit import InTransaction
from relay.store.batch_queue._txn import NO_HOOKS, BatchEvent, RunsFinishHooks
from relay.store.held import Db, HeldConnection
from relay.store.write_group import WriteGroup

__all__ = [
    "BatchEvent",
    "BatchStore",
    "ClaimedItem",
    "Db",
    "ExpiryEvents",
    "FinalItem",
    "HeldConnection",
    "InTransaction",
    "RescuedItem",
    "RetryRaced",
    "RunsFinishHooks",
    "SaveResponses",
    "WriteGroup",
    "record_from_row",
]


class BatchStore:
    """The batch queue's operations on one database, with the finish hooks its finishing
    transactions run. ``db=`` (claim, start, finalize, expiry): a connection the calling task holds
    (:meth:`held`), else a checkout of the engine per call."""

    __slots__ = ("_engine", "_hooks")

    def __init__(self, engine: AsyncEngine, hooks: RunsFinishHooks = NO_HOOKS) -> None:
        self._engine = engine
        self._hooks = hooks

    @property
    def engine(self) -> AsyncEngine:
        """For the other store modules' functions that take the engine (idempotency, façades)."""
        return self._engine

    def held(self) -> HeldConnection:
        """A connection for one batch task to keep between its statements (``relay.store.held``)."""
        return HeldConnection(self._engine)

    def write_group(self) -> WriteGroup | None:
        """On SQLite, one connection whose transactions a replica's claim, start and finalize tasks
        share (``relay.store.write_group``: group commit, no busy-handler sleeps); on Postgres None
        (each task keeps its own connection: :meth:`held`)."""
        return WriteGroup(self._engine) if self._engine.dialect.name == "sqlite" else None

    # ------------------------------------------------------------------------------------------ submit

    async def insert_batch(
        self,
        row: Mapping[str, Any],
        total_items: int,
        *,
        custom_ids: Sequence[str | None] | None = None,
        first: InTransaction | None = None,
    ) -> None:
        """The batch and its items in one transaction (``_submit.insert_batch``); a batch of no items
        finishes at once, its hooks included. ``IntegrityError`` (nothing written) for a duplicate."""
        await _submit.insert_batch(
            self._engine, row, total_items, custom_ids=custom_ids, first=first, hooks=self._hooks
        )

    async def cancel(
        self,
        batch_id: str,
        *,
        events_for: Callable[[list[int]], Sequence[BatchEvent]],
        also: InTransaction | None = None,
    ) -> list[int]:
        """Cancel the batch and its available items with one event each (SPEC §10.5); the idxs.
        ``also`` runs in the transaction that cancelled it (not on a repeated cancel)."""
        return await _submit.cancel(
            self._engine, batch_id, events_for=events_for, hooks=self._hooks, also=also
        )

    # ------------------------------------------------------------------------------------------ retry

    async def count_retry(self, batch_id: str, chosen: RetrySelection) -> int:
        """How many items of the batch a retry with ``chosen`` takes (SPEC §17)."""
        return await _retry.count_selected(self._engine, batch_id, chosen)

    async def retry_idxs(
        self, batch_id: str, chosen: RetrySelection, *, after_idx: int, limit: int
    ) -> list[int]:
        """A page of the idxs a retry takes, ascending, above ``after_idx``."""
        return await _retry.selected_idxs(self._engine, batch_id, chosen, after_idx=after_idx, limit=limit)

    async def insert_retry_batch(
        self,
        row: Mapping[str, Any],
        chosen: RetrySelection,
        total_items: int,
        *,
        copy_request_chunks: bool,
        first: InTransaction | None = None,
    ) -> None:
        """The retry batch and its items copied server side in one transaction (``_retry``)."""
        await _retry.insert_retry_batch(
            self._engine, row, chosen, total_items, copy_request_chunks=copy_request_chunks, first=first
        )

    # ------------------------------------------------------------------------------------------ hot loop

    async def claim(
        self, instance_id: str, limit: int, *, db: Db | None = None, skip_policies: Collection[str] = ()
    ) -> list[ClaimedItem]:
        """Reserve up to ``limit`` items of one batch for ``instance_id`` (fair order), passing over
        batches of the policies in ``skip_policies`` (held back by pacing, SPEC §17)."""
        return await _claims.claim(self._engine if db is None else db, instance_id, limit, skip_policies)

    async def start(
        self, instance_id: str, keys: Sequence[tuple[str, int]], *, db: Db | None = None
    ) -> set[tuple[str, int]]:
        """Make these reserved items ``running``; the ones started (one statement per group)."""
        return await _claims.start(self._engine if db is None else db, instance_id, keys)

    async def finalize_many(
        self,
        instance_id: str,
        finals: Sequence[FinalItem],
        save_responses: SaveResponses | None = None,
        *,
        db: Db | None = None,
    ) -> set[tuple[str, int]]:
        """Final states and events of these running items in ONE transaction; the keys finalized."""
        return await _finish.finalize_many(
            self._engine if db is None else db, instance_id, finals, save_responses, self._hooks
        )

    async def settle_offloaded(
        self, batch_id: str, finals: Sequence[FinalItem], save_responses: SaveResponses | None = None
    ) -> list[FinalItem]:
        """An offloaded batch's mapped results (``_offload``): the items that changed."""
        return await _offload.settle_offloaded(self._engine, batch_id, finals, save_responses, self._hooks)

    async def open_offloaded_idxs(self, batch_id: str, *, after_idx: int, limit: int) -> list[int]:
        return await _offload.open_idxs(self._engine, batch_id, after_idx=after_idx, limit=limit)

    # ------------------------------------------------------------------------------------------ liveness

    async def heartbeat(self, instance_id: str) -> None:
        await _liveness.heartbeat(self._engine, instance_id)

    async def forget_worker(self, instance_id: str) -> None:
        await _liveness.forget_worker(self._engine, instance_id)

    async def expire_workers(self, silent_for_s: float) -> int:
        return await _liveness.expire_workers(self._engine, silent_for_s)

    async def held_by(self, instance_id: str) -> list[tuple[str, int]]:
        return await _liveness.held_by(self._engine, instance_id)

    async def release_lost_reservations(self, *, by: str, stale_after_s: float) -> int:
        return await _liveness.release_lost_reservations(self._engine, by=by, stale_after_s=stale_after_s)

    async def open_counts(self) -> dict[str, int]:
        return await _liveness.open_counts(self._engine)

    async def rescue(
        self,
        *,
        by: str,
        stale_after_s: float,
        rescue_after_s: float,
        events_for: Callable[[list[RescuedItem]], Sequence[BatchEvent]],
    ) -> list[RescuedItem]:
        return await _liveness.rescue(
            self._engine,
            by=by,
            stale_after_s=stale_after_s,
            rescue_after_s=rescue_after_s,
            events_for=events_for,
            hooks=self._hooks,
        )

    async def put_back(
        self,
        instance_id: str,
        items: Sequence[tuple[str, int]],
        *,
        events_for: Callable[[list[tuple[BatchRecord, int]]], Sequence[BatchEvent]],
    ) -> int:
        return await _liveness.put_back(
            self._engine, instance_id, items, events_for=events_for, hooks=self._hooks
        )

    # ------------------------------------------------------------------------------------------ expiry

    async def expire_due_batches(self, limit: int, events_for: ExpiryEvents) -> list[BatchRecord]:
        return await _expiry.expire_due_batches(self._engine, limit, events_for, self._hooks)

    async def expired_running(self, instance_id: str, limit: int) -> list[BatchRecord]:
        return await _expiry.expired_running(self._engine, instance_id, limit)

    # ------------------------------------------------------------------------------------------ reads

    async def batch_record(self, batch_id: str) -> BatchRecord | None:
        return await _views.batch_record(self._engine, batch_id)

    async def batch_view(
        self, batch_id: str, owner: str | None = None, *, items: bool = True
    ) -> BatchView | None:
        return await _views.batch_view(self._engine, batch_id, owner, items=items)

    async def result_rows(self, batch_id: str, *, after_idx: int, limit: int) -> list[ResultRow]:
        return await _views.result_rows(self._engine, batch_id, after_idx=after_idx, limit=limit)

    async def exists(self, batch_id: str) -> bool:
        """Whether the batch row is there (e.g. after a create whose COMMIT failed)."""
        async with self._engine.connect() as conn:
            return await admin_reads.get_batch(conn, batch_id) is not None

    async def owner_page(
        self, owner: str, *, limit: int, after: str | None, api: str | None
    ) -> tuple[list[dict[str, Any]], bool, dict[str, dict[str, int]]] | None:
        """One page of the owner's batches, newest first, with their item counts: ``(rows, more,
        counts)``, or None when ``after`` is not one of the owner's batches. Three queries."""
        async with self._engine.connect() as conn:
            page = await admin_reads.owner_page(conn, owner, limit=limit, after=after, api=api)
            if page is None:
                return None
            rows, more = page
            counts = await admin_reads.item_counts(conn, [row["id"] for row in rows])
        return rows, more, counts
