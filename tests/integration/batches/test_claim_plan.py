"""The claim's batch pick on Postgres never reads ``batch_items`` but through an index, so a claim costs
the same with 10 000 or 1 000 000 items waiting (SPEC §17 scale; ``bench/claim_at_scale.py`` measures
it). Checked on the planner's own plan, with statistics of a batch half way through: finished items
first in the heap, where a sequential scan looking for the first waiting item reads them all.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.batch_queue._claims import _PG_CLAIM, _PG_PICK
from tests.integration.batches.queue_helpers import submit

ITEMS = 20_000


async def half_done_batch(engine: AsyncEngine, project_id: str) -> None:
    """A batch of ``ITEMS`` items whose first half is completed (one INSERT … generate_series)."""
    batch_id = await submit(engine, 1, project_id=project_id)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO batch_items (batch_id, idx, state, finished_at, status)"
                " SELECT :b, g, CASE WHEN g < :half THEN 'completed' ELSE 'available' END,"
                " CASE WHEN g < :half THEN now() END, CASE WHEN g < :half THEN 200 END"
                " FROM generate_series(1, :last) AS g"
            ),
            {"b": batch_id, "half": ITEMS // 2, "last": ITEMS - 1},
        )
        await conn.execute(
            text(
                "UPDATE batch_items SET state = 'completed', finished_at = now(), status = 200"
                " WHERE batch_id = :b AND idx = 0"
            ),
            {"b": batch_id},
        )


async def pick_plan(engine: AsyncEngine, statement: str = _PG_PICK, *, analyze: bool = True) -> str:
    """The plan of the pick a claim runs on Postgres (``_PG_PICK``, on the driver), no policy held; or
    of the whole claim (``_PG_CLAIM``: 8 items for replica ``r1``). ``analyze``: with statistics
    gathered first, else with none (a fresh database before autovacuum's first pass)."""
    params = ([],) if statement == _PG_PICK else ([], 8, "r1")
    async with engine.begin() as conn:
        if analyze:
            await conn.exec_driver_sql("ANALYZE batches, batch_items, batch_project_turns")
        rows = (await conn.exec_driver_sql(f"EXPLAIN {statement}", params)).scalars().all()
    return "\n".join(str(row) for row in rows)


@pytest.mark.parametrize("other_batches", [0, 40])
async def test_the_pick_reads_items_only_through_the_unreserved_index(
    pg: AsyncEngine, other_batches: int
) -> None:
    """One big batch alone (where an EXISTS was planned as a scan of every item), and among many small
    batches of several projects."""
    await half_done_batch(pg, "prj_big")
    for n in range(other_batches):
        await submit(pg, 5, project_id=f"prj_{n % 8}")

    plan = await pick_plan(pg)

    assert "Seq Scan on batch_items" not in plan, plan
    assert "Bitmap Heap Scan on batch_items" not in plan, plan
    assert "ix_batch_items_unreserved on batch_items" in plan, plan


@pytest.mark.parametrize("analyze", [True, False], ids=["statistics", "no-statistics"])
async def test_the_whole_claim_reads_items_only_through_indexes(pg: AsyncEngine, analyze: bool) -> None:
    """The claim as it runs (one statement: pick, take, stamp, heartbeat, turn) takes the picked
    batch's first waiting items through the unreserved index and reserves exactly those rows, one
    probe of the whole primary key each, with or without statistics (with the batch id apart, a fresh
    table's missing statistics planned a scan of the batch's whole key range per item)."""
    await half_done_batch(pg, "prj_big")

    plan = await pick_plan(pg, _PG_CLAIM, analyze=analyze)

    assert "Seq Scan on batch_items" not in plan, plan
    assert "Bitmap Heap Scan on batch_items" not in plan, plan
    assert plan.count("ix_batch_items_unreserved on batch_items") >= 2, plan  # the pick's probe, the take
    reservation = plan[plan.index("CTE took") : plan.index("CTE stamped")]
    assert "Index Scan using pk_batch_items on batch_items" in reservation, plan
    assert "Index Cond: (((batch_id)::text = (chosen.batch_id)::text) AND (idx = chosen.idx))" in reservation
