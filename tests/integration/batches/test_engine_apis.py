"""The engine under three APIs on real SQLite and Postgres: finish hooks run exactly once per batch in
every finishing transaction, expiry, other APIs' batches (ids, custom ids, no items), façade state."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.batches.hooks import FinishHooks
from relay.domain.batches import is_batch_id, mint_batch_id
from relay.domain.failures import cause_of
from relay.store import batches as batch_store
from relay.store import tables as t
from tests.integration.batches import queue_ops
from tests.integration.batches.conftest import Finished
from tests.integration.batches.queue_helpers import (
    batch_row,
    cancel_events,
    claim_run,
    complete,
    events,
    items,
    put_back_events,
    rescue_events,
    set_back,
    submit,
)


async def api_status(engine: AsyncEngine, batch_id: str) -> str | None:
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None
    return record.api_status


async def test_the_last_finalize_finishes_once_with_counts(engine: AsyncEngine, finished: Finished) -> None:
    batch_id = await submit(engine, 2)
    claimed = await claim_run(engine, "r1", 2)
    assert await complete(engine, "r1", claimed[0], hooks=finished.hooks)
    assert finished == []  # one item still running
    assert await complete(engine, "r1", claimed[1], hooks=finished.hooks)
    assert [(b.id, b.api, b.counts, b.cancelled, b.expired) for b in finished] == [
        (batch_id, "relay", {"completed": 2}, False, False)
    ]
    assert finished[0].project_id == "prj_1"
    assert await api_status(engine, batch_id) == "finished-hook"  # written in the finishing transaction


async def test_cancel_finishes_once_and_flags_cancelled(engine: AsyncEngine, finished: Finished) -> None:
    batch_id = await submit(engine, 3)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id), hooks=finished.hooks)
    await queue_ops.cancel(
        engine, batch_id, events_for=cancel_events(batch_id), hooks=finished.hooks
    )  # idempotent: no second call
    assert [(b.id, b.counts, b.cancelled, b.expired) for b in finished] == [
        (batch_id, {"cancelled": 3}, True, False)
    ]
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.cancel_requested_at is not None


async def test_cancel_with_a_running_item_finishes_when_it_ends(
    engine: AsyncEngine, finished: Finished
) -> None:
    batch_id = await submit(engine, 2)
    claimed = await claim_run(engine, "r1", 1)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id), hooks=finished.hooks)
    assert finished == []
    assert await complete(engine, "r1", claimed[0], hooks=finished.hooks)
    assert [(b.id, b.counts, b.cancelled) for b in finished] == [
        (batch_id, {"completed": 1, "cancelled": 1}, True)
    ]


async def test_rescue_finishes_once(engine: AsyncEngine, finished: Finished) -> None:
    batch_id = await submit(engine, 1)
    await claim_run(engine, "dead", 1)
    await set_back(engine, t.batch_workers, "heartbeat_at", 3600)
    rescued = await queue_ops.rescue(
        engine, stale_after_s=15, rescue_after_s=900, events_for=rescue_events, hooks=finished.hooks
    )
    assert len(rescued) == 1
    await queue_ops.rescue(
        engine, stale_after_s=15, rescue_after_s=900, events_for=rescue_events, hooks=finished.hooks
    )
    assert [(b.id, b.counts) for b in finished] == [(batch_id, {"discarded": 1})]


async def test_put_back_into_a_cancelled_batch_finishes_once(engine: AsyncEngine, finished: Finished) -> None:
    batch_id = await submit(engine, 1)
    claimed = await claim_run(engine, "r1", 1)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id), hooks=finished.hooks)
    assert finished == []
    key = (claimed[0].batch_id, claimed[0].idx)
    assert (
        await queue_ops.put_back(engine, "r1", [key], events_for=put_back_events, hooks=finished.hooks) == 0
    )
    assert [(b.id, b.counts, b.cancelled) for b in finished] == [(batch_id, {"cancelled": 1}, True)]


async def expire_now(engine: AsyncEngine, batch_id: str) -> datetime:
    """Set the batch's deadline in the past, in the database (no waiting)."""
    past = datetime.now(UTC) - timedelta(minutes=5)
    async with engine.begin() as conn:
        await conn.execute(update(t.batches).where(t.batches.c.id == batch_id).values(expires_at=past))
    return past


async def test_expiry_cancels_open_items_with_expired_and_finishes_once(
    engine: AsyncEngine, finished: Finished
) -> None:
    batch_id = await submit(engine, 3, id=mint_batch_id("openai"), api="openai")
    other = await submit(
        engine,
        1,
        expires_at=datetime.now(UTC) + timedelta(hours=24),
        api="anthropic",
        id=mint_batch_id("anthropic"),
    )
    claimed = await claim_run(engine, "r1", 1)
    assert claimed[0].batch_id == batch_id and claimed[0].idx == 0
    assert await complete(engine, "r1", claimed[0], hooks=finished.hooks)
    await expire_now(engine, batch_id)
    swept = await queue_ops.expire_due(engine, hooks=finished.hooks)
    assert [r.id for r in swept] == [batch_id]  # not the batch whose deadline is ahead
    assert await queue_ops.expire_due(engine, hooks=finished.hooks) == []  # finished: nothing left to sweep
    rows = await items(engine, batch_id)
    assert [r["state"] for r in rows] == ["completed", "cancelled", "cancelled"]
    assert all(r["error"].startswith("expired: batch expired at ") for r in rows[1:])
    assert cause_of(rows[1]["error"]) == "expired"
    got = await events(engine, batch_id)
    assert [idx for idx, _ in got] == [0, 1, 2]  # one usage event per item
    assert [(b.id, b.api, b.counts, b.cancelled, b.expired) for b in finished] == [
        (batch_id, "openai", {"completed": 1, "cancelled": 2}, False, True)
    ]
    assert (await queue_ops.batch_record(engine, other)).completed_at is None  # type: ignore[union-attr]


async def test_an_item_running_at_expiry_finishes_the_batch_when_put_back(
    engine: AsyncEngine, finished: Finished
) -> None:
    batch_id = await submit(engine, 2, id=mint_batch_id("openai"), api="openai")
    claimed = await claim_run(engine, "r1", 1)
    await expire_now(engine, batch_id)
    assert [r.id for r in await queue_ops.expire_due(engine, hooks=finished.hooks)] == [batch_id]
    assert finished == []  # idx 0 still runs
    assert [r.id for r in await queue_ops.expired_running(engine, "r1", 10)] == [batch_id]
    assert await queue_ops.expired_running(engine, "r2", 10) == []
    key = (claimed[0].batch_id, claimed[0].idx)
    # A stopping replica does not hand an expired batch's item back: it is cancelled as expired.
    assert (
        await queue_ops.put_back(engine, "r1", [key], events_for=put_back_events, hooks=finished.hooks) == 0
    )
    rows = await items(engine, batch_id)
    assert [r["state"] for r in rows] == ["cancelled", "cancelled"]
    assert all(r["error"].startswith("expired: ") for r in rows)
    assert [(b.id, b.expired, b.cancelled) for b in finished] == [(batch_id, True, False)]


async def test_relay_batches_never_expire(engine: AsyncEngine, finished: Finished) -> None:
    batch_id = await submit(engine, 1)
    assert await queue_ops.expire_due(engine, hooks=finished.hooks) == []
    assert (await queue_ops.batch_record(engine, batch_id)).completed_at is None  # type: ignore[union-attr]


async def test_other_apis_ids_custom_ids_and_facade_state(engine: AsyncEngine) -> None:
    ids = {api: mint_batch_id(api) for api in ("relay", "openai", "anthropic")}
    assert ids["relay"].startswith("b_") and ids["openai"].startswith("batch_")
    assert ids["anthropic"].startswith("msgbatch_")
    assert all(is_batch_id(i) for i in ids.values())
    assert not is_batch_id("batch_x") and not is_batch_id("job_" + ids["relay"][2:])
    row = batch_row(
        id=ids["openai"],
        api="openai",
        inbound_shape="openai_embeddings",
        api_status="in_progress",
        api_data={"endpoint": "/v1/embeddings", "metadata": {"k": "v"}},
    )
    await queue_ops.insert_batch(engine, row, 2, custom_ids=["a", "b"])
    assert [(r["idx"], r["custom_id"], r["state"]) for r in await items(engine, ids["openai"])] == [
        (0, "a", "available"),
        (1, "b", "available"),
    ]
    async with engine.begin() as conn:
        assert (
            await batch_store.set_api_state(conn, ids["openai"], api_status="finalizing", only_if_status="x")
            is False
        )
        assert await batch_store.set_api_state(
            conn, ids["openai"], api_status="finalizing", api_data={"n": 1}, only_if_status="in_progress"
        )
        stored = (
            await conn.execute(
                select(t.batches.c.api_status, t.batches.c.api_data).where(t.batches.c.id == ids["openai"])
            )
        ).one()
    assert tuple(stored) == ("finalizing", {"n": 1})


async def test_an_item_less_batch_only_for_other_apis_finishes_at_create(
    engine: AsyncEngine, finished: Finished
) -> None:
    with pytest.raises(ValueError, match="at least one item"):
        await queue_ops.insert_batch(engine, batch_row(), 0, hooks=finished.hooks)
    failed = mint_batch_id("openai")
    await queue_ops.insert_batch(
        engine, batch_row(id=failed, api="openai", api_status="failed"), 0, hooks=finished.hooks
    )
    record = await queue_ops.batch_record(engine, failed)
    assert record is not None and record.completed_at is not None and record.total_items == 0
    assert [(b.id, b.counts) for b in finished] == [(failed, {})]
    async with engine.begin() as conn:  # the CHECK holds for relay batches whatever the caller does
        with pytest.raises(IntegrityError):
            await conn.execute(update(t.batches).where(t.batches.c.id == failed).values(api="relay"))


async def test_a_hook_that_fails_rolls_the_finish_back(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 1)

    async def broken(conn: AsyncConnection, batches: Sequence[Any]) -> None:
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError):
        await queue_ops.cancel(
            engine, batch_id, events_for=cancel_events(batch_id), hooks=FinishHooks(broken)
        )
    record = await queue_ops.batch_record(engine, batch_id)
    assert record is not None and record.completed_at is None and record.status == "queued"
    assert await events(engine, batch_id) == []


async def test_owner_pages_by_api_after_and_before(engine: AsyncEngine) -> None:
    start = datetime.now(UTC) - timedelta(hours=1)
    ids = []
    for n in range(4):
        ids.append(
            await submit(
                engine, 1, id=mint_batch_id("openai"), api="openai", created_at=start + timedelta(minutes=n)
            )
        )
    relay_id = await submit(engine, 1, created_at=start + timedelta(minutes=10))
    await submit(engine, 1, id=mint_batch_id("openai"), api="openai", owner="user:someone-else")
    newest_first = ids[::-1]
    async with engine.connect() as conn:
        page = await batch_store.owner_page(conn, batch_row()["owner"], limit=2, api="openai")
        assert page is not None and [r["id"] for r in page[0]] == newest_first[:2] and page[1] is True
        page = await batch_store.owner_page(
            conn, batch_row()["owner"], limit=2, after=newest_first[1], api="openai"
        )
        assert page is not None and [r["id"] for r in page[0]] == newest_first[2:] and page[1] is False
        page = await batch_store.owner_page(conn, batch_row()["owner"], limit=2, before=ids[0], api="openai")
        assert page is not None and [r["id"] for r in page[0]] == [ids[2], ids[1]] and page[1] is True
        every = await batch_store.owner_page(conn, batch_row()["owner"], limit=10)
        assert every is not None and [r["id"] for r in every[0]] == [relay_id, *newest_first]
        # The anchor must be the owner's batch of that API.
        assert (
            await batch_store.owner_page(conn, batch_row()["owner"], limit=2, after=relay_id, api="openai")
            is None
        )


async def test_result_rows_carry_custom_ids_and_upstream_status(engine: AsyncEngine) -> None:

    batch_id = mint_batch_id("anthropic")
    await queue_ops.insert_batch(
        engine, batch_row(id=batch_id, api="anthropic"), 2, custom_ids=["first", "second"]
    )
    claimed = await claim_run(engine, "r1", 2)
    assert await complete(engine, "r1", claimed[0])
    rows = await queue_ops.result_rows(engine, batch_id, after_idx=-1, limit=10)
    assert [(r.idx, r.custom_id, r.state, r.status) for r in rows] == [
        (0, "first", "completed", 200),
        (1, "second", "running", None),
    ]


async def test_only_the_hooks_passed_run(engine: AsyncEngine, finished: Finished) -> None:
    """No registry: a finishing transaction given no hooks (another runtime's, say) runs none."""
    batch_id = await submit(engine, 1)
    await queue_ops.cancel(engine, batch_id, events_for=cancel_events(batch_id))
    assert finished == [] and await api_status(engine, batch_id) is None
