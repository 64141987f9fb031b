"""relay.batches.workers.ReadyQueue: claimed items wait per batch, served round-robin across batches and
in idx order within one; a cancel drops a batch's waiting items; each keeps its read-ahead body."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from relay.batches.workers import ReadyQueue
from relay.store.batch_queue import ClaimedItem


def items(batch_id: str, count: int) -> list[ClaimedItem]:
    record = SimpleNamespace(id=batch_id)  # the queue reads only the batch's id
    return [ClaimedItem(record, idx) for idx in range(count)]  # type: ignore[arg-type]


def test_batches_are_served_round_robin_and_each_in_idx_order() -> None:
    ready = ReadyQueue()
    for item in [*items("big", 3), *items("small", 1)]:
        ready.add(item, None)
    assert len(ready) == 4
    order = []
    while ready:
        item, _ = ready.pop()
        order.append((item.batch_id, item.idx))
    # the small batch, claimed after the big one's claim-ahead, does not wait behind all of it
    assert order == [("big", 0), ("small", 0), ("big", 1), ("big", 2)]
    assert len(ready) == 0


async def test_an_item_keeps_its_read_ahead_body() -> None:
    ready = ReadyQueue()
    body: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
    first, second = items("b", 2)
    ready.add(first, body)
    ready.add(second, None)
    assert ready.pop() == (first, body)
    assert ready.pop() == (second, None)


def test_dropping_a_batch_forgets_only_its_waiting_items() -> None:
    ready = ReadyQueue()
    for item in [*items("cancelled", 2), *items("kept", 1)]:
        ready.add(item, None)
    dropped = ready.drop_batch("cancelled")
    assert [(i.batch_id, i.idx) for i in dropped] == [("cancelled", 0), ("cancelled", 1)]
    assert ready.drop_batch("unknown") == []
    assert len(ready) == 1
    assert ready.pop()[0].batch_id == "kept"
