"""The batch store's reads on real SQLite and Postgres: the status view costs the same queries whatever
the item count, and results page by idx.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import cancel_events, claim_run, complete, submit

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
