"""The finalizer's response flush (relay.batches.finalizer) on real databases: a group's rows commit
only after its response bodies are on disk, and a failed flush discards the group's completed items
instead of committing rows that point at bytes which may be lost; a finish hook that fails fails only
its own batch's items; under load a group waits out ``GROUP_INTERVAL_S`` and grows meanwhile."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches import finalizer as finalizer_module
from relay.batches.finalizer import Finalizer
from relay.batches.hooks import FinishHooks
from relay.batches.item_result import ItemResult
from relay.domain.batches import ResponseRef
from relay.payloads.base import KeptResponse
from relay.store.batch_queue import BatchStore
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import events, item_event, items, submit

FILE_REF = ResponseRef("responses-0123456789abcdef.data", 0, 10)
REF = KeptResponse(ref=FILE_REF)


async def run_group(
    engine: AsyncEngine, flush: Callable[[], Awaitable[None]], results: list[ItemResult], batch_id: str
) -> list[bool]:
    settled: list[bool] = []
    finalizer = Finalizer(BatchStore(engine), "r1", lambda key, result, done: settled.append(done), flush)
    finalizer.start()
    try:
        for idx, result in enumerate(results):
            finalizer.add((batch_id, idx), result)
        assert await finalizer.drain(10)
    finally:
        await finalizer.close()
    return settled


async def test_rows_commit_after_the_flush(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 2)
    claimed = await queue_ops.claim(engine, "r1", 2)
    await queue_ops.start(engine, "r1", [(c.batch_id, c.idx) for c in claimed])
    flushed: list[list[str]] = []

    async def flush() -> None:  # what the rows say at flush time: nothing committed yet
        flushed.append([row["state"] for row in await items(engine, batch_id)])

    results = [
        ItemResult("completed", 200, None, item_event(batch_id, 0), REF),
        ItemResult(
            "discarded", 500, "upstream returned 500", item_event(batch_id, 1, "upstream returned 500")
        ),
    ]
    assert await run_group(engine, flush, results, batch_id) == [True, True]
    assert len(claimed) == 2 and flushed == [["running", "running"]]
    rows = await items(engine, batch_id)
    assert [(r["state"], r["response_file"]) for r in rows] == [
        ("completed", FILE_REF.file),
        ("discarded", None),
    ]


async def test_a_failed_flush_discards_the_completed_items_of_the_group(engine: AsyncEngine) -> None:
    batch_id = await submit(engine, 2)
    claimed = await queue_ops.claim(engine, "r1", 2)
    await queue_ops.start(engine, "r1", [(c.batch_id, c.idx) for c in claimed])

    async def flush() -> None:
        await asyncio.sleep(0)
        raise OSError(errno.EIO, "Input/output error")

    results = [
        ItemResult("completed", 200, None, item_event(batch_id, 0), REF),
        ItemResult(
            "discarded", 500, "upstream returned 500", item_event(batch_id, 1, "upstream returned 500")
        ),
    ]
    assert await run_group(engine, flush, results, batch_id) == [True, True]
    lost = "internal error: the response could not be stored (Input/output error)"
    rows = await items(engine, batch_id)
    assert [(r["state"], r["error"], r["response_file"]) for r in rows] == [
        ("discarded", lost, None),
        ("discarded", "upstream returned 500", None),
    ]
    assert await events(engine, batch_id) == [(0, lost), (1, "upstream returned 500")]


async def test_a_finish_hook_that_fails_fails_only_its_own_batch(engine: AsyncEngine) -> None:
    """Items of two batches in one group; a hook that raises when ``bad`` finishes: the group's
    transaction fails, and the finalizer writes it again batch by batch, so ``good`` still finishes."""
    bad, good = await submit(engine, 1), await submit(engine, 1)
    claimed = await queue_ops.claim(engine, "r1", 1) + await queue_ops.claim(engine, "r1", 1)
    assert {c.batch_id for c in claimed} == {bad, good}
    await queue_ops.start(engine, "r1", [(c.batch_id, c.idx) for c in claimed])
    hooked: list[str] = []

    async def hook(conn: Any, batches: Any) -> None:
        if any(batch.id == bad for batch in batches):
            raise RuntimeError("a broken hook")
        hooked.extend(batch.id for batch in batches)

    async def flush() -> None:
        return None

    settled: list[tuple[str, bool]] = []
    finalizer = Finalizer(
        BatchStore(engine, FinishHooks(hook)),
        "r1",
        lambda key, result, done: settled.append((key[0], done)),
        flush,
    )
    finalizer.start()
    try:
        for batch_id in (bad, good):
            finalizer.add((batch_id, 0), ItemResult("completed", 200, None, item_event(batch_id, 0)))
        assert await finalizer.drain(10)
    finally:
        await finalizer.close()
    assert settled == [(good, True)] and hooked == [good]
    assert [r["state"] for r in await items(engine, good)] == ["completed"]
    assert [r["state"] for r in await items(engine, bad)] == ["running"]  # left to the rescue


async def test_under_load_a_group_waits_out_the_interval_and_takes_what_finished_meanwhile(
    engine: AsyncEngine, monkeypatch: Any
) -> None:
    """The first item is written at once (no group before it); one that finishes right after waits
    until ``GROUP_INTERVAL_S`` has passed since that group started, and the items finishing meanwhile
    join it: three items, two groups. Without the interval the second item would be written alone."""
    monkeypatch.setattr(finalizer_module, "GROUP_INTERVAL_S", 2.0)
    batch_id = await submit(engine, 3)
    claimed = await queue_ops.claim(engine, "r1", 3)
    await queue_ops.start(engine, "r1", [(c.batch_id, c.idx) for c in claimed])
    groups: list[list[str]] = []  # the rows' states at each group's flush

    async def flush() -> None:
        groups.append([row["state"] for row in await items(engine, batch_id)])

    settled: list[int] = []
    finalizer = Finalizer(BatchStore(engine), "r1", lambda key, result, done: settled.append(key[1]), flush)
    finalizer.start()
    try:
        finalizer.add((batch_id, 0), ItemResult("completed", 200, None, item_event(batch_id, 0)))
        assert await finalizer.drain(10)  # written at once: the first group
        finalizer.add((batch_id, 1), ItemResult("completed", 200, None, item_event(batch_id, 1)))
        await asyncio.sleep(0.1)  # the finalizer has seen item 1 and waits out the interval
        assert settled == [0] and set(finalizer.pending) == {(batch_id, 1)}
        finalizer.add((batch_id, 2), ItemResult("completed", 200, None, item_event(batch_id, 2)))
        assert await finalizer.drain(10)
    finally:
        await finalizer.close()
    assert settled == [0, 1, 2]
    assert groups == [["running"] * 3, ["completed", "running", "running"]]  # two groups: 0, then 1 + 2
    assert [r["state"] for r in await items(engine, batch_id)] == ["completed"] * 3
