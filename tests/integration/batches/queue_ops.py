"""The batch store's operations as functions of an engine (or a held connection) and the hooks.

Why. The queue tests simulate replicas by several engines on one database and vary the finish hooks
from call to call; each call here builds the store a runtime builds once (``BatchStore(engine, hooks)``,
which holds nothing else) and calls its public method, so every test goes through the one public
surface of ``relay.store.batch_queue`` exactly as the engine does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from relay.batches import expiry
from relay.batches.hooks import NO_HOOKS, FinishHooks
from relay.domain.batch_record import CANCELLED_ERROR, BatchRecord, BatchView, ResultRow
from relay.store.batch_queue import (
    BatchStore,
    ClaimedItem,
    Db,
    ExpiryEvents,
    FinalItem,
    InTransaction,
    RescuedItem,
    SaveResponses,
)
from relay.store.engine import Engine
from relay.usage.event import UsageEvent

__all__ = ["CANCELLED_ERROR", "ClaimedItem", "FinalItem", "RescuedItem"]


def _store(db: Db, hooks: FinishHooks = NO_HOOKS) -> BatchStore:
    return BatchStore(db if isinstance(db, Engine) else db.engine, hooks)


def _on(db: Db) -> Db | None:
    """The held connection a call runs on (None: the store's engine)."""
    return None if isinstance(db, Engine) else db


async def insert_batch(
    engine: Engine,
    row: Mapping[str, Any],
    total_items: int,
    *,
    custom_ids: Sequence[str | None] | None = None,
    first: InTransaction | None = None,
    hooks: FinishHooks = NO_HOOKS,
) -> None:
    await _store(engine, hooks).insert_batch(row, total_items, custom_ids=custom_ids, first=first)


async def cancel(
    engine: Engine,
    batch_id: str,
    *,
    events_for: Callable[[list[int]], list[UsageEvent]],
    hooks: FinishHooks = NO_HOOKS,
) -> list[int]:
    return await _store(engine, hooks).cancel(batch_id, events_for=events_for)


async def claim(db: Db, instance_id: str, limit: int, skip_policies: Sequence[str] = ()) -> list[ClaimedItem]:
    return await _store(db).claim(instance_id, limit, db=_on(db), skip_policies=skip_policies)


async def start(db: Db, instance_id: str, keys: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
    return await _store(db).start(instance_id, keys, db=_on(db))


async def finalize_many(
    db: Db,
    instance_id: str,
    finals: Sequence[FinalItem],
    save_responses: SaveResponses | None = None,
    hooks: FinishHooks = NO_HOOKS,
) -> set[tuple[str, int]]:
    return await _store(db, hooks).finalize_many(instance_id, finals, save_responses, db=_on(db))


async def heartbeat(engine: Engine, instance_id: str) -> None:
    await _store(engine).heartbeat(instance_id)


async def forget_worker(engine: Engine, instance_id: str) -> None:
    await _store(engine).forget_worker(instance_id)


async def expire_workers(engine: Engine, silent_for_s: float) -> int:
    return await _store(engine).expire_workers(silent_for_s)


async def held_by(engine: Engine, instance_id: str) -> list[tuple[str, int]]:
    return await _store(engine).held_by(instance_id)


RESCUER = "rescuer"
"""The replica a test's rescue runs as, unless it names one: it holds no item."""


async def release_lost_reservations(engine: Engine, *, stale_after_s: float, by: str = RESCUER) -> int:
    return await _store(engine).release_lost_reservations(by=by, stale_after_s=stale_after_s)


async def open_counts(engine: Engine) -> dict[str, int]:
    return await _store(engine).open_counts()


async def rescue(
    engine: Engine,
    *,
    stale_after_s: float,
    rescue_after_s: float,
    events_for: Callable[[list[RescuedItem]], list[UsageEvent]],
    hooks: FinishHooks = NO_HOOKS,
    by: str = RESCUER,
) -> list[RescuedItem]:
    return await _store(engine, hooks).rescue(
        by=by, stale_after_s=stale_after_s, rescue_after_s=rescue_after_s, events_for=events_for
    )


async def put_back(
    engine: Engine,
    instance_id: str,
    items: Sequence[tuple[str, int]],
    *,
    events_for: Callable[[list[tuple[BatchRecord, int]]], list[UsageEvent]],
    hooks: FinishHooks = NO_HOOKS,
) -> int:
    return await _store(engine, hooks).put_back(instance_id, items, events_for=events_for)


async def expire_due_batches(
    engine: Engine, limit: int, events_for: ExpiryEvents, hooks: FinishHooks = NO_HOOKS
) -> list[BatchRecord]:
    return await _store(engine, hooks).expire_due_batches(limit, events_for)


async def expired_running(engine: Engine, instance_id: str, limit: int) -> list[BatchRecord]:
    return await _store(engine).expired_running(instance_id, limit)


async def expire_due(engine: Engine, hooks: FinishHooks = NO_HOOKS) -> list[BatchRecord]:
    """``relay.batches.expiry.expire_due`` on the store of this engine and these hooks."""
    return await expiry.expire_due(_store(engine, hooks))


async def batch_record(engine: Engine, batch_id: str) -> BatchRecord | None:
    return await _store(engine).batch_record(batch_id)


async def batch_view(
    engine: Engine, batch_id: str, owner: str | None = None, *, items: bool = True
) -> BatchView | None:
    return await _store(engine).batch_view(batch_id, owner, items=items)


async def result_rows(engine: Engine, batch_id: str, *, after_idx: int, limit: int) -> list[ResultRow]:
    return await _store(engine).result_rows(batch_id, after_idx=after_idx, limit=limit)
