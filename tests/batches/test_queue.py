"""The durable batch queue on real SQLite and Postgres databases: claims, final states, cancel, rescue.

Replicas are simulated by several engines on one database (each its own connection pool), claiming,
finishing and rescuing concurrently with ``asyncio.gather``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches.hooks import NO_HOOKS, FinishHooks
from relay.domain.batch_record import BatchRecord
from relay.domain.batches import ResponseRef
from relay.domain.ids import mint_id
from relay.store import tables as t
from relay.store.batch_queue import ClaimedItem, RescuedItem
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.usage.event import UsageEvent
from tests.batches import queue_ops

KEY_HASH = "ab" * 32


def batch_row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": mint_id("b"),
        "created_at": datetime.now(UTC),
        "owner": KEY_HASH,
        "key_hash": KEY_HASH,
        "token_claims": None,
        "policy_id": "pol_1",
        "policy_name": "default",
        "project_id": "prj_1",
        "team_id": "tm_1",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_1",
        "credential_kind": "key",
        "credential_id": "rk_1",
        "inbound_shape": "openai",
    }
    row.update(overrides)
    return row


async def submit(engine: AsyncEngine, items: int, **overrides: Any) -> str:
    row = batch_row(**overrides)
    await queue_ops.insert_batch(engine, row, items)
    return str(row["id"])


def item_event(batch_id: str, idx: int, error: str | None = None) -> UsageEvent:
    return UsageEvent(
        id=mint_id("ue"),
        ts=datetime.now(UTC),
        request_id=f"req_{batch_id}_{idx}",
        source="batch",
        status=0 if error else 200,
        inbound_shape="openai",
        latency_ms=1,
        policy_id="pol_1",
        project_id="prj_1",
        team_id="tm_1",
        principal_kind="serviceaccount",
        principal_id="sa_1",
        credential_kind="key",
        credential_id="rk_1",
        batch_id=batch_id,
        batch_idx=idx,
        error_kind="cancelled" if error == "cancelled" else ("worker_lost" if error else None),
        error_message=error,
    )


def cancel_events(batch_id: str) -> Any:
    return lambda idxs: [item_event(batch_id, idx, "cancelled") for idx in idxs]


def rescue_events(items: list[RescuedItem]) -> list[UsageEvent]:
    return [item_event(item.batch_id, item.idx, item.error) for item in items]


def put_back_events(pairs: list[tuple[BatchRecord, int]]) -> list[UsageEvent]:
    return [item_event(record.id, idx, "cancelled") for record, idx in pairs]


async def finalize(
    engine: AsyncEngine,
    instance: str,
    batch_id: str,
    idx: int,
    *,
    state: Any,
    status: int | None,
    error: str | None,
    event: UsageEvent,
    hooks: FinishHooks = NO_HOOKS,
) -> bool:
    """``queue_ops.finalize_many`` for one item: True when it was this replica's to finish."""
    final = queue_ops.FinalItem(batch_id, idx, state, status, error, event)
    return bool(await queue_ops.finalize_many(engine, instance, [final], hooks=hooks))


async def complete(
    engine: AsyncEngine, instance: str, item: ClaimedItem, hooks: FinishHooks = NO_HOOKS
) -> bool:
    return await finalize(
        engine,
        instance,
        item.batch_id,
        item.idx,
        state="completed",
        status=200,
        error=None,
        event=item_event(item.batch_id, item.idx),
        hooks=hooks,
    )


async def items(engine: AsyncEngine, batch_id: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(t.batch_items).where(t.batch_items.c.batch_id == batch_id).order_by(t.batch_items.c.idx)
        )
        return [dict(row._mapping) for row in rows]


async def events(engine: AsyncEngine, batch_id: str) -> list[tuple[int, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(t.usage_events.c.batch_idx, t.usage_events.c.error_message)
            .where(t.usage_events.c.batch_id == batch_id)
            .order_by(t.usage_events.c.batch_idx)
        )
        return [(idx, error) for idx, error in rows]


async def completed_at(engine: AsyncEngine, batch_id: str) -> datetime | None:
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None
    return record.completed_at


async def available(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).where(t.batch_items.c.state == "available")
        return int((await conn.execute(query)).scalar_one())


async def set_back(engine: AsyncEngine, table: Any, column: str, seconds: float) -> None:
    """Move a timestamp column of every row into the past (what a dead replica's rows look like)."""
    async with engine.begin() as conn:
        rows = (await conn.execute(select(table))).all()
        for row in rows:
            key = {c.name: row._mapping[c.name] for c in table.primary_key.columns}
            when = row._mapping[column]
            if when is not None:
                where = [table.c[name] == value for name, value in key.items()]
                await conn.execute(
                    update(table).where(*where).values({column: when - timedelta(seconds=seconds)})
                )


async def claim_run(engine: AsyncEngine, instance_id: str, limit: int) -> list[queue_ops.ClaimedItem]:
    """Claim (reserve) and start at once: what a worker pool does for items it runs."""
    claimed = await queue_ops.claim(engine, instance_id, limit)
    started = await queue_ops.start(engine, instance_id, [(c.batch_id, c.idx) for c in claimed])
    assert started == {(c.batch_id, c.idx) for c in claimed}
    return claimed


# ---------------------------------------------------------------------------------------------- submit


async def test_insert_writes_the_batch_and_every_item_available(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5)

    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None
    assert (view.record.status, view.record.total_items, view.record.completed_at) == ("queued", 5, None)
    assert view.record.policy_name == "default" and view.record.token_claims is None
    assert view.counts == {"available": 5}
    assert [(item.idx, item.state) for item in view.items] == [(i, "available") for i in range(5)]


async def test_a_duplicate_batch_id_writes_nothing(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)

    with pytest.raises(IntegrityError):
        await submit(engine, 7, id=batch_id)

    assert len(await items(engine, batch_id)) == 3
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.total_items == 3


async def test_a_failing_item_insert_leaves_no_batch(database_url: str) -> None:
    """All or nothing (SPEC §10.1): a trigger refuses item 7, so the batch row must go too."""
    engine = create_engine(database_url)
    try:
        await upgrade_to_head(engine)
        async with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(
                    text(
                        "CREATE FUNCTION refuse_7() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                        " IF NEW.idx = 7 THEN RAISE EXCEPTION 'item 7 refused'; END IF; RETURN NEW; END $$"
                    )
                )
                await conn.execute(
                    text(
                        "CREATE TRIGGER refuse_7 BEFORE INSERT ON batch_items"
                        " FOR EACH ROW EXECUTE FUNCTION refuse_7()"
                    )
                )
            else:
                await conn.execute(
                    text(
                        "CREATE TRIGGER refuse_7 BEFORE INSERT ON batch_items WHEN NEW.idx = 7"
                        " BEGIN SELECT RAISE(ABORT, 'item 7 refused'); END"
                    )
                )
        row = batch_row()
        with pytest.raises(Exception, match="item 7 refused"):
            await queue_ops.insert_batch(engine, row, 10)

        assert await queue_ops.batch_record(engine, row["id"]) is None
        assert await items(engine, row["id"]) == []
        await queue_ops.insert_batch(engine, batch_row(), 5)  # the trigger only refuses idx 7
    finally:
        await engine.dispose()


async def test_a_token_batch_records_its_claims(engine: AsyncEngine) -> None:
    claims = {"sub": "usr_1", "jti": "j1", "exp": 1_900_000_000}
    batch_id = await submit(
        engine,
        1,
        owner="user:usr_1",
        key_hash=None,
        token_claims=claims,
        principal_kind="user",
        credential_kind="token",
        credential_id="j1",
    )
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.token_claims == claims and record.key_hash is None


# ---------------------------------------------------------------------------------------------- claim


async def test_claim_marks_items_running_and_returns_the_attribution(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5, policy_name="gold", inbound_shape="anthropic")

    claimed = await claim_run(engine, "r1", 2)

    assert [(c.batch_id, c.idx) for c in claimed] == [(batch_id, 0), (batch_id, 1)]
    record = claimed[0].batch
    assert claimed[1].batch is record
    assert (record.owner, record.key_hash, record.policy_id, record.policy_name) == (
        KEY_HASH,
        KEY_HASH,
        "pol_1",
        "gold",
    )
    assert (record.project_id, record.team_id, record.principal_kind, record.principal_id) == (
        "prj_1",
        "tm_1",
        "serviceaccount",
        "sa_1",
    )
    assert (record.credential_kind, record.credential_id, record.inbound_shape) == (
        "key",
        "rk_1",
        "anthropic",
    )
    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"]) for r in rows[:3]] == [("running", "r1")] * 2 + [
        ("available", None)
    ]
    assert all(r["claimed_at"] is not None for r in rows[:2])
    async with engine.connect() as conn:
        workers = (await conn.execute(select(t.batch_workers.c.instance_id))).scalars().all()
    assert workers == ["r1"]  # a claimant always has a worker row, or rescue would take it for dead


async def test_claims_take_turns_so_a_small_batch_starts_at_once(engine: AsyncEngine) -> None:
    big = await submit(engine, 200)
    small = await submit(engine, 3)

    rounds = [await claim_run(engine, "r1", 10) for _ in range(4)]

    assert [(r[0].batch_id, [c.idx for c in r]) for r in rounds] == [
        (big, list(range(10))),
        (small, [0, 1, 2]),
        (big, list(range(10, 20))),
        (big, list(range(20, 30))),
    ]


async def test_a_newer_batch_is_served_before_one_already_served(engine: AsyncEngine) -> None:
    first = await submit(engine, 50)
    assert (await claim_run(engine, "r1", 5))[0].batch_id == first
    second = await submit(engine, 50)
    third = await submit(engine, 50)

    order = [(await claim_run(engine, "r1", 5))[0].batch_id for _ in range(6)]

    assert order == [second, third, first, second, third, first]


async def test_nothing_to_claim(engine: AsyncEngine) -> None:
    assert await claim_run(engine, "r1", 10) == []
    batch_id = await submit(engine, 2)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))
    assert await claim_run(engine, "r1", 10) == []
    assert await claim_run(engine, "r1", 0) == []


async def test_concurrent_claimants_never_claim_an_item_twice(
    engine: AsyncEngine, replicas: list[AsyncEngine]
) -> None:
    batch_ids = [await submit(engine, n) for n in (150, 40, 7)]
    seen: Counter[tuple[str, int]] = Counter()

    async def worker(replica: AsyncEngine, name: str) -> None:
        while True:
            claimed = await claim_run(replica, name, 7)
            seen.update((c.batch_id, c.idx) for c in claimed)
            if not claimed and await available(replica) == 0:
                return  # (an empty claim alone may only mean every open batch was locked just then)

    await asyncio.gather(*(worker(r, f"r{n}-{w}") for n, r in enumerate(replicas) for w in range(3)))

    expected = {(b, i) for b, n in zip(batch_ids, (150, 40, 7), strict=True) for i in range(n)}
    assert set(seen) == expected
    assert set(seen.values()) == {1}


async def test_concurrent_finishers_complete_the_batch_once(
    engine: AsyncEngine, replicas: list[AsyncEngine]
) -> None:
    """The last two items finishing at once on two replicas must still set completed_at."""
    for _ in range(3):
        batch_id = await submit(engine, 30)
        claimed = [await claim_run(r, f"r{n}", 10) for n, r in enumerate(replicas)]
        results = await asyncio.gather(
            *(complete(replicas[n], f"r{n}", item) for n, group in enumerate(claimed) for item in group)
        )
        assert all(results)
        assert await completed_at(engine, batch_id) is not None
        assert len(await events(engine, batch_id)) == 30


# ---------------------------------------------------------------------------------------------- finalize


async def test_finalize_writes_one_event_and_completes_the_batch_at_the_end(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 2)
    first, _ = await claim_run(engine, "r1", 2)

    assert await complete(engine, "r1", first)
    assert await completed_at(engine, batch_id) is None
    assert await finalize(
        engine,
        "r1",
        batch_id,
        1,
        state="discarded",
        status=500,
        error="upstream returned 500",
        event=item_event(batch_id, 1, "upstream returned 500"),
    )

    assert await completed_at(engine, batch_id) is not None
    assert await events(engine, batch_id) == [(0, None), (1, "upstream returned 500")]
    rows = await items(engine, batch_id)
    assert [(r["state"], r["status"], r["error"]) for r in rows] == [
        ("completed", 200, None),
        ("discarded", 500, "upstream returned 500"),
    ]
    assert all(r["finished_at"] is not None for r in rows)
    # A second finalize of a finished item writes nothing.
    assert not await complete(engine, "r1", first)
    assert len(await events(engine, batch_id)) == 2


async def test_finalize_by_another_replica_or_after_rescue_writes_nothing(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)
    (item,) = await claim_run(engine, "r1", 1)
    assert not await complete(engine, "r2", item)

    await queue_ops.forget_worker(engine, "r1")  # r1 is gone
    rescued = await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)
    assert [(r.batch_id, r.idx) for r in rescued] == [(batch_id, 0)]

    assert not await complete(engine, "r1", item)
    (row,) = await items(engine, batch_id)
    assert (row["state"], row["error"]) == (
        "discarded",
        "worker lost: replica r1 stopped before finishing the item",
    )
    assert await events(engine, batch_id) == [
        (0, "worker lost: replica r1 stopped before finishing the item")
    ]
    assert await completed_at(engine, batch_id) is not None


async def test_finalize_refuses_what_the_schema_would(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)
    (item,) = await claim_run(engine, "r1", 1)
    event = item_event(batch_id, 0)
    with pytest.raises(ValueError, match="final"):
        await finalize(engine, "r1", batch_id, 0, state="running", status=None, error=None, event=event)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="error"):
        await finalize(engine, "r1", batch_id, 0, state="discarded", status=None, error=None, event=event)
    with pytest.raises(ValueError, match="usage event"):
        await finalize(
            engine,
            "r1",
            batch_id,
            0,
            state="completed",
            status=200,
            error=None,
            event=item_event(batch_id, 9),
        )
    assert (await items(engine, batch_id))[0]["state"] == "running"
    assert await complete(engine, "r1", item)


# ---------------------------------------------------------------------------------------------- cancel


async def test_cancel_cancels_available_items_once_and_leaves_running_ones(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 5)
    running = await claim_run(engine, "r1", 2)

    assert await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id)) == [2, 3, 4]

    rows = await items(engine, batch_id)
    assert [(r["state"], r["error"]) for r in rows] == [("running", None)] * 2 + [
        ("cancelled", "cancelled")
    ] * 3
    assert all(r["finished_at"] is not None for r in rows[2:])
    assert await events(engine, batch_id) == [(i, "cancelled") for i in (2, 3, 4)]
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and (record.status, record.completed_at) == ("cancelled", None)

    def must_not_be_called(idxs: list[int]) -> list[UsageEvent]:
        raise AssertionError(idxs)

    assert await queue_ops.cancel(engine, batch_id, events_for=must_not_be_called) == []
    assert len(await events(engine, batch_id)) == 3

    # The replica running the items stops one and lets the other finish; the last one completes the batch.
    assert await finalize(
        engine,
        "r1",
        batch_id,
        0,
        state="cancelled",
        status=None,
        error="cancelled",
        event=item_event(batch_id, 0, "cancelled"),
    )
    assert await completed_at(engine, batch_id) is None
    assert await complete(engine, "r1", running[1])
    assert await completed_at(engine, batch_id) is not None
    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None and view.counts == {"completed": 1, "cancelled": 4}


async def test_cancel_with_nothing_running_completes_the_batch(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)
    assert await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id)) == [0, 1, 2]
    assert await completed_at(engine, batch_id) is not None
    assert await queue_ops.cancel(engine, "b_" + "0" * 26, events_for=cancel_events("x")) == []


async def test_cancel_writes_nothing_when_the_events_cannot_be_built(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)

    def broken(idxs: list[int]) -> list[UsageEvent]:
        raise RuntimeError("no events")

    with pytest.raises(RuntimeError):
        await queue_ops.cancel(engine, batch_id, events_for=broken)
    with pytest.raises(ValueError, match="usage event"):
        await queue_ops.cancel(engine, batch_id, events_for=lambda idxs: [])

    view = await queue_ops.batch_view(engine, batch_id)
    assert view is not None and view.record.status == "queued" and view.counts == {"available": 3}


# ---------------------------------------------------------------------------------------------- liveness


async def test_heartbeat_and_forget_worker(engine: AsyncEngine) -> None:
    await queue_ops.heartbeat(engine, "r1")
    await set_back(engine, t.batch_workers, "heartbeat_at", 60)
    await queue_ops.heartbeat(engine, "r1")
    async with engine.connect() as conn:
        (row,) = (await conn.execute(select(t.batch_workers))).all()
    assert row.instance_id == "r1" and row.heartbeat_at >= row.started_at

    await queue_ops.forget_worker(engine, "r1")
    async with engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(t.batch_workers))).scalar_one() == 0


async def test_rescue_discards_the_items_of_a_replica_with_a_stale_heartbeat(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 4)
    await claim_run(engine, "dead", 2)
    await set_back(engine, t.batch_workers, "heartbeat_at", 120)
    await claim_run(engine, "alive", 2)

    rescued = await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)

    assert [(r.idx, r.claimed_by, r.batch.policy_name) for r in rescued] == [
        (0, "dead", "default"),
        (1, "dead", "default"),
    ]
    error = "worker lost: replica dead stopped before finishing the item"
    rows = await items(engine, batch_id)
    assert [(r["state"], r["error"]) for r in rows] == [("discarded", error)] * 2 + [("running", None)] * 2
    assert await events(engine, batch_id) == [(0, error), (1, error)]
    assert await completed_at(engine, batch_id) is None
    assert (
        await queue_ops.rescue(engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events) == []
    )


async def test_rescue_discards_items_running_past_the_latest_bound(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)
    await claim_run(engine, "r1", 1)
    await set_back(engine, t.batch_items, "claimed_at", 1000)  # its heartbeat is fresh

    (rescued,) = await queue_ops.rescue(
        engine, stale_after_s=30, rescue_after_s=900, events_for=rescue_events
    )

    assert rescued.error == "worker lost: replica r1 ran longer than RELAY_BATCH_RESCUE_AFTER_S (900 s)"
    assert await events(engine, batch_id) == [(0, rescued.error)]
    assert await completed_at(engine, batch_id) is not None


async def test_concurrent_rescuers_rescue_each_item_once(
    engine: AsyncEngine, replicas: list[AsyncEngine]
) -> None:
    batch_ids = [await submit(engine, 20) for _ in range(3)]
    for _ in range(6):
        await claim_run(engine, "dead", 10)
    await queue_ops.forget_worker(engine, "dead")

    results = await asyncio.gather(
        *(
            queue_ops.rescue(r, stale_after_s=30, rescue_after_s=900, events_for=rescue_events)
            for r in replicas * 2
        )
    )

    rescued = Counter((item.batch_id, item.idx) for result in results for item in result)
    assert len(rescued) == 60 and set(rescued.values()) == {1}
    for batch_id in batch_ids:
        assert len(await events(engine, batch_id)) == 20
        assert await completed_at(engine, batch_id) is not None


async def test_put_back_returns_items_to_available(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 3)
    await claim_run(engine, "r1", 3)

    assert await queue_ops.put_back(engine, "r2", [(batch_id, 0)], events_for=put_back_events) == 0
    assert (
        await queue_ops.put_back(engine, "r1", [(batch_id, 0), (batch_id, 1)], events_for=put_back_events)
        == 2
    )

    rows = await items(engine, batch_id)
    assert [(r["state"], r["claimed_by"], r["claimed_at"]) for r in rows[:2]] == [
        ("available", None, None)
    ] * 2
    assert rows[2]["state"] == "running"
    assert [c.idx for c in await claim_run(engine, "r2", 5)] == [0, 1]
    assert await events(engine, batch_id) == []


async def test_put_back_cancels_items_of_a_batch_cancelled_meanwhile(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 2)
    await claim_run(engine, "r1", 2)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))  # on another replica

    assert (
        await queue_ops.put_back(engine, "r1", [(batch_id, 0), (batch_id, 1)], events_for=put_back_events)
        == 0
    )

    assert [r["state"] for r in await items(engine, batch_id)] == ["cancelled", "cancelled"]
    assert await events(engine, batch_id) == [(0, "cancelled"), (1, "cancelled")]
    assert await completed_at(engine, batch_id) is not None


async def test_finalize_many_settles_a_group_in_one_transaction(engine: AsyncEngine) -> None:
    """The worker pool's group write: items of several batches in one call; an item no longer ours
    (rescued meanwhile) is left out with no event; each batch left with nothing open is completed; a
    group that names an item twice, or carries a wrong event, writes nothing."""
    first, second = await submit(engine, 2), await submit(engine, 3)
    mine = await claim_run(engine, "r1", 2) + await claim_run(engine, "r1", 3)
    assert {c.batch_id for c in mine} == {first, second}
    lost = next(c for c in mine if c.batch_id == second and c.idx == 2)

    def ref(c: queue_ops.ClaimedItem) -> ResponseRef:
        return ResponseRef("responses-0123456789abcdef.data", 100 * c.idx, 10 + c.idx)

    done_ok = [
        queue_ops.FinalItem(c.batch_id, c.idx, "completed", 200, None, item_event(c.batch_id, c.idx), ref(c))
        for c in mine
    ]
    with pytest.raises(ValueError):
        await queue_ops.finalize_many(engine, "r1", [done_ok[0], done_ok[0]])
    with pytest.raises(ValueError):  # only a completed item has a response
        c = mine[0]
        await queue_ops.finalize_many(
            engine,
            "r1",
            [queue_ops.FinalItem(c.batch_id, c.idx, "discarded", 500, "x", done_ok[0].event, ref(c))],
        )
    with pytest.raises(ValueError):
        wrong = done_ok[0]
        await queue_ops.finalize_many(
            engine,
            "r1",
            [queue_ops.FinalItem(wrong.batch_id, wrong.idx, "completed", 200, None, item_event(second, 9))],
        )
    async with engine.begin() as conn:  # `lost` is no longer r1's: another replica rescued it
        await conn.execute(
            update(t.batch_items)
            .where(t.batch_items.c.batch_id == second, t.batch_items.c.idx == 2)
            .values(claimed_by="r2")
        )

    done = await queue_ops.finalize_many(engine, "r1", done_ok)

    assert done == {(c.batch_id, c.idx) for c in mine if c != lost}
    assert [r["state"] for r in await items(engine, first)] == ["completed", "completed"]
    assert [r["state"] for r in await items(engine, second)] == ["completed", "completed", "running"]
    assert [idx for idx, _ in await events(engine, first)] == [0, 1]
    assert [idx for idx, _ in await events(engine, second)] == [0, 1]
    assert await completed_at(engine, first) is not None
    assert await completed_at(engine, second) is None
    # Each completed item's row says where its response body is; the results read it from there.
    rows = await queue_ops.result_rows(engine, second, after_idx=-1, limit=10)
    assert [r.response for r in rows] == [ref(mine[2]), ref(mine[3]), None]


async def test_held_by_and_open_counts(engine: AsyncEngine) -> None:
    """The orphan check's view (what the database says a replica runs) and the open-items gauge."""
    first, second = await submit(engine, 4), await submit(engine, 3)
    assert await queue_ops.open_counts(engine) == {"available": 7, "running": 0}
    mine = await claim_run(engine, "r1", 2)
    theirs = await claim_run(engine, "r2", 2)
    assert {c.batch_id for c in mine} != {c.batch_id for c in theirs}  # one batch per claim, fair order
    assert await queue_ops.held_by(engine, "r1") == sorted((c.batch_id, c.idx) for c in mine)
    assert await queue_ops.held_by(engine, "nobody") == []
    assert await complete(engine, "r1", mine[0])
    assert await queue_ops.held_by(engine, "r1") == [(mine[1].batch_id, mine[1].idx)]
    assert await queue_ops.open_counts(engine) == {"available": 3, "running": 3}
    assert {first, second} == {mine[0].batch_id, theirs[0].batch_id}


# ---------------------------------------------------------------------------------------------- reads


@pytest.fixture
def statements(engine: AsyncEngine) -> Iterator[list[str]]:
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def test_the_status_view_costs_the_same_queries_for_10_and_2000_items(
    engine: AsyncEngine, statements: list[str]
) -> None:
    small, large = await submit(engine, 10), await submit(engine, 2000)
    await claim_run(engine, "r1", 5)  # from small (oldest)
    claimed = await claim_run(engine, "r1", 3)  # from large
    assert await complete(engine, "r1", claimed[0])
    await queue_ops.cancel(engine, small, events_for=cancel_events(small))

    selects, totals = [], []
    for batch_id in (small, large):
        statements.clear()
        view = await queue_ops.batch_view(engine, batch_id)
        selects.append(sum(1 for s in statements if s.lstrip().upper().startswith("SELECT")))
        totals.append(len(statements))  # SQLite's BEGIN included
        assert view is not None and sum(view.counts.values()) == len(view.items) == view.record.total_items
    assert selects == [3, 3]  # the record, the counts (one GROUP BY), the items
    assert totals[0] == totals[1]

    view = await queue_ops.batch_view(engine, large)
    assert view is not None and view.counts == {"available": 1997, "running": 2, "completed": 1}
    assert [i.state for i in view.items[:4]] == ["completed", "running", "running", "available"]
    view = await queue_ops.batch_view(engine, small)
    assert view is not None and view.counts == {"running": 5, "cancelled": 5}
    assert await queue_ops.batch_view(engine, "b_" + "0" * 26) is None


async def test_results_page_by_idx(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 25)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))

    pages, after = [], -1
    while page := await queue_ops.result_rows(engine, batch_id, after_idx=after, limit=10):
        pages.append(page)
        after = page[-1].idx
    assert [len(p) for p in pages] == [10, 10, 5]
    assert [r.idx for p in pages for r in p] == list(range(25))
    assert {(r.state, r.error) for p in pages for r in p} == {("cancelled", "cancelled")}


# ---------------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize(
    "values",
    [
        {"state": "completed"},  # a final state without finished_at
        {"state": "discarded", "finished_at": datetime.now(UTC)},  # a failure without an error
        {"state": "running"},  # running without a claimant
        {"claimed_by": "r1"},  # reserved without a claim time
        {"state": "waiting"},
    ],
)
async def test_the_schema_refuses_impossible_items(engine: AsyncEngine, values: dict[str, Any]) -> None:
    batch_id = await submit(engine, 1)
    with pytest.raises(IntegrityError, match="ck_batch_items_"):
        async with engine.begin() as conn:
            await conn.execute(
                update(t.batch_items).where(t.batch_items.c.batch_id == batch_id).values(values)
            )


async def test_the_schema_refuses_a_batch_without_its_credential(engine: AsyncEngine) -> None:
    with pytest.raises(IntegrityError, match="ck_batches_credential_recorded"):
        await submit(engine, 1, key_hash=None)


# ---------------------------------------------------------------------------------------------- scale


async def test_50000_items_insert_and_claim_quickly(
    engine: AsyncEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured, not asserted beyond sanity (SPEC §13: speed is for benchmarks): printed with -s."""
    started = time.perf_counter()
    batch_id = await submit(engine, 50_000)
    inserted = time.perf_counter() - started
    for _ in range(3):  # move past the first items, then time a claim deep into the batch
        await claim_run(engine, "r1", 16)
    started = time.perf_counter()
    claimed = await claim_run(engine, "r1", 16)
    claim_s = time.perf_counter() - started
    started = time.perf_counter()
    view = await queue_ops.batch_view(engine, batch_id)
    view_s = time.perf_counter() - started

    assert [c.idx for c in claimed] == list(range(48, 64))
    assert view is not None and view.counts == {"available": 49_936, "running": 64}
    with capsys.disabled():
        print(
            f"\n[{engine.dialect.name}] insert 50 000 items: {inserted * 1000:.0f} ms;"
            f" claim 16: {claim_s * 1000:.1f} ms; status view: {view_s * 1000:.0f} ms"
        )
