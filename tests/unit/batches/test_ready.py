"""relay.batches.ready.ReadyQueue: claimed items wait per project and batch, served round-robin across
projects, then across a project's batches, then in idx order (SPEC §17); a cancel drops a batch's
waiting items; each keeps its read-ahead body; ``pop`` passes over policies that may not start yet
(a paced policy whose next block is being asked for) and counts each policy's items."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from relay.batches.ready import ReadyQueue
from relay.store.batch_queue import ClaimedItem


def items(batch_id: str, count: int, project: str | None = None, policy: str = "pol") -> list[ClaimedItem]:
    """``count`` items of a batch; its project is the batch's own unless given."""
    record = SimpleNamespace(id=batch_id, project_id=project or f"prj-{batch_id}", policy_id=policy)
    return [ClaimedItem(record, idx) for idx in range(count)]  # type: ignore[arg-type]


def drain(ready: ReadyQueue) -> list[tuple[str, int]]:
    order = []
    while ready:
        entry = ready.pop()
        assert entry is not None
        order.append((entry[0].batch_id, entry[0].idx))
    return order


def test_batches_are_served_round_robin_and_each_in_idx_order() -> None:
    ready = ReadyQueue()
    for item in [*items("big", 3), *items("small", 1)]:
        ready.add(item, None)
    assert len(ready) == 4
    order = drain(ready)
    # the small batch, claimed after the big one's claim-ahead, does not wait behind all of it
    assert order == [("big", 0), ("small", 0), ("big", 1), ("big", 2)]
    assert len(ready) == 0


def test_projects_take_turns_then_their_batches_then_idxs() -> None:
    """A project with three batches claimed ahead gets every third slot, not three of every four."""
    ready = ReadyQueue()
    for item in [*items("a1", 2, "A"), *items("a2", 2, "A"), *items("a3", 1, "A"), *items("b1", 3, "B")]:
        ready.add(item, None)
    assert drain(ready) == [
        ("a1", 0),
        ("b1", 0),
        ("a2", 0),
        ("b1", 1),
        ("a3", 0),
        ("b1", 2),
        ("a1", 1),
        ("a2", 1),
    ]


def test_a_project_claimed_later_joins_the_turns_at_the_back() -> None:
    ready = ReadyQueue()
    for item in items("a1", 3, "A"):
        ready.add(item, None)
    first = ready.pop()
    assert first is not None and first[0].idx == 0
    for item in items("b1", 2, "B"):
        ready.add(item, None)
    assert drain(ready) == [("a1", 1), ("b1", 0), ("a1", 2), ("b1", 1)]


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
    for item in items("same-project", 1, "prj-cancelled"):
        ready.add(item, None)
    dropped = ready.drop_batch("cancelled")
    assert [(i.batch_id, i.idx) for i in dropped] == [("cancelled", 0), ("cancelled", 1)]
    assert ready.drop_batch("unknown") == []
    assert len(ready) == 2
    assert sorted(drain(ready)) == [("kept", 0), ("same-project", 0)]
    assert ready.drop_batch("kept") == []


def test_pop_passes_over_policies_that_may_not_start_and_they_keep_their_turn() -> None:
    ready = ReadyQueue()
    for item in [*items("paced", 2, "A", policy="slow"), *items("other", 2, "B", policy="fast")]:
        ready.add(item, None)
    assert (ready.of_policy("slow"), ready.of_policy("fast")) == (2, 2)
    entry = ready.pop(lambda policy: policy != "slow")
    assert entry is not None and (entry[0].batch_id, entry[0].idx) == ("other", 0)
    assert ready.pop(lambda policy: policy == "nobody") is None
    # the passed-over project is still first in turn once its policy may start again
    assert drain(ready) == [("paced", 0), ("other", 1), ("paced", 1)]
    assert (ready.of_policy("slow"), ready.of_policy("fast"), len(ready)) == (0, 0, 0)


def test_dropping_counts_the_policy_down() -> None:
    ready = ReadyQueue()
    for item in [*items("x", 3, policy="p"), *items("y", 1, policy="p")]:
        ready.add(item, None)
    ready.drop_policy("p")
    assert (ready.of_policy("p"), len(ready)) == (0, 0)
