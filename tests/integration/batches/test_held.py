"""The connection a batch task holds between its statements (relay.store.held), on real SQLite and
Postgres: kept while in use, given back after a quiet spell or an error, never kept inside a
transaction; and the batch queue's statements run on it."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store.held import HeldConnection
from tests.integration.batches import queue_ops
from tests.integration.batches.queue_helpers import submit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def server_pid(conn: AsyncConnection) -> int:
    raw = (await conn.get_raw_connection()).driver_connection
    assert raw is not None
    pid: int = raw.get_server_pid()
    return pid


async def sqlite_hands_out_the_engine(held: HeldConnection, engine: AsyncEngine) -> bool:
    """On SQLite (no pre-ping there) every use is the engine itself: True when that is the case."""
    if engine.dialect.name != "sqlite":
        return False
    for _ in range(2):
        async with held.use() as db:
            assert db is engine
    await held.close()
    return True


async def test_postgres_keeps_one_connection_until_it_idles(engine: AsyncEngine) -> None:
    clock = Clock()
    held = HeldConnection(engine, idle_s=1.0, clock=clock)
    if await sqlite_hands_out_the_engine(held, engine):
        return
    async with held.use() as first:
        assert isinstance(first, AsyncConnection)
        pid = await server_pid(first)
    clock.now += 0.9
    async with held.use() as again:
        assert again is first and await server_pid(again) == pid  # no checkout, no ping
    clock.now += 1.5  # idle for longer than idle_s: given back; the next use checks out anew
    async with held.use() as later:
        assert later is not first and first.closed  # given back to the pool (which pinged it again)
    await held.close()
    assert later.closed


async def test_a_failed_use_invalidates_its_connection(engine: AsyncEngine) -> None:
    held = HeldConnection(engine)
    if await sqlite_hands_out_the_engine(held, engine):
        return
    with pytest.raises(RuntimeError):
        async with held.use() as broken:
            assert isinstance(broken, AsyncConnection)
            pid = await server_pid(broken)
            raise RuntimeError("the statement failed")
    assert broken.closed
    async with held.use() as fresh:
        assert isinstance(fresh, AsyncConnection)
        assert await server_pid(fresh) != pid  # the broken one was discarded, not pooled
    await held.close()


async def test_a_connection_left_in_a_transaction_is_not_kept(engine: AsyncEngine) -> None:
    held = HeldConnection(engine)
    if await sqlite_hands_out_the_engine(held, engine):
        return
    async with held.use() as first:
        assert isinstance(first, AsyncConnection)
        await first.execute(text("SELECT 1"))  # autobegins, and nobody commits
    assert first.closed
    async with held.use() as second:
        assert second is not first and not second.in_transaction()
    await held.close()


async def test_claims_and_starts_run_on_a_held_connection(engine: AsyncEngine) -> None:
    """The queue's claim and the starter's start, one after the other on ONE held connection (as the
    dispatcher and the starter use them), leave it outside any transaction and do what they do on the
    engine."""
    batch_id = await submit(engine, 3)
    held = HeldConnection(engine)
    async with held.use() as db:
        claimed = await queue_ops.claim(db, "r1", 2)
        assert [c.idx for c in claimed] == [0, 1]
        if isinstance(db, AsyncConnection):
            assert not db.in_transaction()
        assert await queue_ops.start(db, "r1", [(batch_id, 0)]) == {(batch_id, 0)}
        assert await queue_ops.start(db, "r2", [(batch_id, 1)]) == set()  # reserved by r1, not r2
    async with held.use() as db:
        assert [c.idx for c in await queue_ops.claim(db, "r2", 5)] == [2]
    await held.close()
