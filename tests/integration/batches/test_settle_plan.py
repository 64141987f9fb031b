"""The finalize's settle on Postgres (``_PG_SETTLE``) finds a group's items by their primary key, never
by scanning ``batch_items``, with or without statistics: the plan of a fresh table is made before
autovacuum has analysed it, and such a plan once hashed the group and scanned every item of the table
per finalize group (``bench/batch_throughput.py``'s 0 ms phase on a fresh database). Each row takes its
values by its place in the idx array: no join to the arrays unnested, which a one-row estimate made a
nested loop unnesting them again per row.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store.batch_queue._finish import _PG_SETTLE
from tests.integration.batches.queue_helpers import submit

ITEMS = 20_000
GROUP = 64


@pytest.mark.parametrize("analyze", [True, False], ids=["statistics", "no-statistics"])
async def test_the_settle_probes_the_groups_items_by_key(pg: AsyncEngine, analyze: bool) -> None:
    batch_id = await submit(pg, 1, project_id="prj_big")
    async with pg.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO batch_items (batch_id, idx, state, claimed_by, claimed_at)"
                " SELECT :b, g, 'running', 'r1', now() FROM generate_series(1, :last) AS g"
            ),
            {"b": batch_id, "last": ITEMS - 1},
        )
        if analyze:
            await conn.exec_driver_sql("ANALYZE batch_items")
    idxs = list(range(100, 100 + GROUP))
    params = (batch_id, idxs, "r1", ["completed"] * GROUP, [200] * GROUP, [None] * GROUP)
    params += ([None] * GROUP, [None] * GROUP, [None] * GROUP)
    async with pg.begin() as conn:
        plan = "\n".join(
            str(row) for row in (await conn.exec_driver_sql(f"EXPLAIN {_PG_SETTLE}", params)).scalars()
        )

    assert "Seq Scan on batch_items" not in plan, plan
    assert "Bitmap Heap Scan on batch_items" not in plan, plan
    assert "Index Scan using pk_batch_items on batch_items" in plan, plan
    assert "Index Cond: (((batch_id)::text = (locked.batch_id)::text) AND (idx = locked.idx))" in plan, plan
    assert "Function Scan" not in plan and "Join Filter" not in plan, plan  # no arrays unnested per row
