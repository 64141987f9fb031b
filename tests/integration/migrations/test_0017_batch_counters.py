"""Revision 0017 (SPEC §10.2's constant-cost view, §17 "Scale"): ``batch_counters`` is created and
filled in from the items of every batch that exists, so a database upgraded with batches half done
shows the same counts as before; a downgrade drops it. SQLite and Postgres."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import batches as batch_store
from relay.store import tables as t
from relay.store.batch_queue import BatchStore
from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head
from tests.integration.batches.queue_helpers import batch_row
from tests.integration.migrations.helpers import tables

I = t.batch_items  # noqa: E741


async def set_states(engine: AsyncEngine, batch_id: str, states: dict[int, str]) -> None:
    """Item states as an older Relay left them (no counters to bump then)."""
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        for idx, state in states.items():
            values: dict[str, object] = {"state": state}
            if state == "running":
                values |= {"claimed_by": "r1", "claimed_at": now}
            else:
                values |= {"finished_at": now, "error": None if state == "completed" else "cancelled"}
            await conn.execute(update(I).where(I.c.batch_id == batch_id, I.c.idx == idx).values(**values))


async def test_0017_counts_the_final_items_of_existing_batches(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0016")
    assert "batch_counters" not in await tables(engine)
    store = BatchStore(engine)
    half, ended, waiting = batch_row(), batch_row(), batch_row()
    await store.insert_batch(half, 6)
    await store.insert_batch(ended, 3)
    await store.insert_batch(waiting, 2)
    await set_states(
        engine, half["id"], {0: "completed", 1: "completed", 2: "discarded", 3: "cancelled", 4: "running"}
    )
    await set_states(engine, ended["id"], {0: "cancelled", 1: "cancelled", 2: "cancelled"})

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []

    C = t.batch_counters
    async with engine.connect() as conn:
        rows = await conn.execute(select(C.c.batch_id, C.c.completed, C.c.discarded, C.c.cancelled))
        kept = {row.batch_id: (row.completed, row.discarded, row.cancelled) for row in rows}
        assert kept == {half["id"]: (2, 1, 1), ended["id"]: (0, 0, 3)}  # no final item: no row
        for batch in (half, ended, waiting):
            counted = await batch_store.counted_item_states(conn, batch["id"])
            assert (await batch_store.item_counts(conn, [batch["id"]]))[batch["id"]] == counted
    assert counted == {"available": 2}

    await downgrade_to(engine, "0016")
    assert "batch_counters" not in await tables(engine)
    async with engine.connect() as conn:
        assert len((await conn.execute(select(I.c.idx))).all()) == 11  # items untouched
