"""The starter's grouped starts (``relay.batches.starter``) against a real database: each waiting
caller gets its own item's answer from one statement, and a caller cancelled while it waits cancels only
its own future: the group still starts its item (the worker pool then treats it as possibly started,
and the finalizer settles only items really running) and answers every other caller."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.batches.starter import Starter
from relay.store.batch_queue import BatchStore
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import items, submit


async def test_a_caller_cancelled_while_its_start_waits_leaves_the_others_answered(
    engine: AsyncEngine,
) -> None:
    batch_id = await submit(engine, 3)
    assert [c.idx for c in await queue_ops.claim(engine, "r1", 3)] == [0, 1, 2]
    starter = Starter(BatchStore(engine), "r1")
    starter.open()
    try:
        waiting = [asyncio.create_task(starter.start((batch_id, idx))) for idx in (0, 1)]
        await asyncio.sleep(0)  # both wait for the group, which has not gone out yet
        waiting[0].cancel()
        assert await waiting[1] is True
        with pytest.raises(asyncio.CancelledError):
            await waiting[0]
        states = {row["idx"]: row["state"] for row in await items(engine, batch_id)}
        assert states == {0: "running", 1: "running", 2: "available"}  # the cancelled caller's too
        # A later caller of a key whose earlier caller was cancelled gets an answer of its own: the
        # item runs already, so it is not started again.
        assert await asyncio.wait_for(starter.start((batch_id, 0)), 10) is False
        assert await asyncio.wait_for(starter.start((batch_id, 2)), 10) is True
    finally:
        await starter.close()
