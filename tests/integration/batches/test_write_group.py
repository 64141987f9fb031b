"""The SQLite write group (relay.store.write_group) on a real SQLite file: turns that meet share one
transaction and one COMMIT; a turn's ``async with`` exits only once its writes are committed; a turn
that fails is rolled back alone; a turn cancelled mid-way aborts its group (the others get a transient
error, nothing of theirs committed) and the group goes on; urgent turns go first; the batch queue's
claim, start and finalize run as turns; Postgres has no write group.

COMMITs are counted with a SQLAlchemy ``commit`` event listener on the real engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from relay.store.batch_queue import BatchStore, FinalItem
from relay.store.engine import create_engine, is_transient
from relay.store.write_group import GroupAborted, WriteGroup
from tests.integration.batches.queue_helpers import item_event, items, submit


class Commits:
    def __init__(self, engine: AsyncEngine) -> None:
        self.count = 0
        event.listen(engine.sync_engine, "commit", self._seen)

    def _seen(self, _conn: object) -> None:
        self.count += 1


@pytest.fixture
async def sqlite_engine(tmp_path) -> AsyncIterator[AsyncEngine]:  # type: ignore[no-untyped-def]
    engine = create_engine(f"sqlite:///{tmp_path / 'group.db'}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE probe (id INTEGER PRIMARY KEY, who TEXT NOT NULL)"))
    yield engine
    await engine.dispose()


@pytest.fixture
async def group(sqlite_engine: AsyncEngine) -> AsyncIterator[WriteGroup]:
    writer = WriteGroup(sqlite_engine)
    writer.open()
    yield writer
    await writer.close()


async def rows(engine: AsyncEngine) -> list[str]:
    """What another connection sees committed."""
    async with engine.connect() as conn:
        return [row.who for row in await conn.execute(text("SELECT who FROM probe ORDER BY who"))]


async def insert(conn: AsyncConnection, who: str) -> None:
    await conn.execute(text("INSERT INTO probe (who) VALUES (:who)"), {"who": who})


class Gate:
    """Holds the first turn open until released, so the turns started meanwhile queue behind it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()


async def held_turn(group: WriteGroup, gate: Gate, who: str) -> None:
    async with group.use() as conn:
        await insert(conn, who)
        gate.entered.set()
        await gate.release.wait()


async def queued_while(gate: Gate, *turns: Callable[[], Awaitable[None]]) -> list[asyncio.Task[None]]:
    """Start ``turns`` while the gated turn holds the connection, then release it."""
    await gate.entered.wait()
    tasks = [asyncio.create_task(turn()) for turn in turns]
    await asyncio.sleep(0)  # each has queued its turn
    gate.release.set()
    return tasks


async def test_turns_that_meet_share_one_commit_and_exit_once_committed(
    group: WriteGroup, sqlite_engine: AsyncEngine
) -> None:
    commits = Commits(sqlite_engine)
    seen_at_exit: dict[str, list[str]] = {}

    async def turn(who: str) -> None:
        async with group.use() as conn:
            await insert(conn, who)
        seen_at_exit[who] = await rows(sqlite_engine)  # committed by the time the turn exits

    gate = Gate()
    first = asyncio.create_task(held_turn(group, gate, "a"))
    tasks = await queued_while(gate, *(lambda who=who: turn(who) for who in "bcde"))
    await asyncio.gather(first, *tasks)
    assert await rows(sqlite_engine) == ["a", "b", "c", "d", "e"]
    assert commits.count == 2  # the gated turn alone, then the four that queued behind it together
    for who in "bcde":
        assert who in seen_at_exit[who]


async def test_a_failing_turn_is_rolled_back_alone(group: WriteGroup, sqlite_engine: AsyncEngine) -> None:
    commits = Commits(sqlite_engine)

    async def ok(who: str) -> None:
        async with group.use() as conn:
            await insert(conn, who)

    async def fails(who: str) -> None:
        async with group.use() as conn:
            await insert(conn, who)
            raise LookupError(f"turn {who} failed")

    gate = Gate()
    first = asyncio.create_task(held_turn(group, gate, "a"))
    # Queued behind the gate: a failing turn first in its group (the transaction itself), one in the
    # middle (a savepoint), and good turns around them.
    tasks = await queued_while(gate, lambda: fails("x"), lambda: ok("b"), lambda: fails("y"), lambda: ok("c"))
    outcomes = await asyncio.gather(first, *tasks, return_exceptions=True)
    assert [type(o).__name__ if o else None for o in outcomes] == [
        None,
        "LookupError",
        None,
        "LookupError",
        None,
    ]
    assert await rows(sqlite_engine) == ["a", "b", "c"]
    assert commits.count == 2  # b and c still share one commit


async def test_a_turn_cancelled_midway_aborts_its_group_which_goes_on(
    group: WriteGroup, sqlite_engine: AsyncEngine
) -> None:
    cancel_me = Gate()

    async def ok(who: str) -> None:
        async with group.use() as conn:
            await insert(conn, who)

    gate = Gate()
    first = asyncio.create_task(held_turn(group, gate, "a"))
    tasks = await queued_while(gate, lambda: ok("b"), lambda: held_turn(group, cancel_me, "x"))
    await cancel_me.entered.wait()  # b ran, x is inside its turn
    tasks[1].cancel()
    outcomes = await asyncio.gather(first, *tasks, return_exceptions=True)
    assert outcomes[0] is None
    assert isinstance(outcomes[1], GroupAborted) and is_transient(outcomes[1])  # its loop retries it
    assert isinstance(outcomes[2], asyncio.CancelledError)
    assert await rows(sqlite_engine) == ["a"]  # nothing of b or x
    await ok("c")  # the group goes on, on a fresh connection
    assert await rows(sqlite_engine) == ["a", "c"]


async def test_urgent_turns_go_first_and_cut_a_group_short(
    group: WriteGroup, sqlite_engine: AsyncEngine
) -> None:
    order: list[str] = []
    commits = Commits(sqlite_engine)

    async def turn(who: str, *, urgent: bool = False, hold: Gate | None = None) -> None:
        async with (group.urgent if urgent else group).use() as conn:
            order.append(who)
            await insert(conn, who)
            if hold is not None:
                hold.entered.set()
                await hold.release.wait()

    gate = Gate()
    first = asyncio.create_task(held_turn(group, gate, "a"))
    inner = Gate()
    # Behind the gate: b (held open), c; then u, urgent, arrives while b runs.
    tasks = await queued_while(gate, lambda: turn("b", hold=inner), lambda: turn("c"))
    await inner.entered.wait()
    urgent = asyncio.create_task(turn("u", urgent=True))
    await asyncio.sleep(0)
    inner.release.set()
    await asyncio.gather(first, *tasks, urgent)
    assert order == ["b", "u", "c"]  # u ran right after b, before c
    assert commits.count == 3  # a; b and u together (committed right after u); c
    assert await rows(sqlite_engine) == ["a", "b", "c", "u"]


async def test_close_refuses_waiting_turns(group: WriteGroup) -> None:
    gate = Gate()
    first = asyncio.create_task(held_turn(group, gate, "a"))
    await gate.entered.wait()

    async def waiting() -> None:
        async with group.use():
            pass

    later = asyncio.create_task(waiting())
    await asyncio.sleep(0)
    await group.close()
    gate.release.set()  # the turn in progress ends: its writes were never committed
    outcomes = await asyncio.gather(first, later, return_exceptions=True)
    assert all(isinstance(o, GroupAborted) for o in outcomes)
    with pytest.raises(GroupAborted):
        async with group.use():
            pass


async def test_claim_start_and_finalize_run_as_turns(engine: AsyncEngine) -> None:
    """The batch queue's hot statements in a write group's turns (SQLite; Postgres has none)."""
    store = BatchStore(engine)
    writer = store.write_group()
    if engine.dialect.name == "postgresql":
        assert writer is None
        return
    assert writer is not None
    writer.open()
    try:
        batch_id = await submit(engine, 3)
        async with writer.use() as db:
            claimed = await store.claim("r1", 3, db=db)
        keys = [(c.batch_id, c.idx) for c in claimed]
        assert keys == [(batch_id, 0), (batch_id, 1), (batch_id, 2)]

        async def start() -> set[tuple[str, int]]:
            async with writer.urgent.use() as db:
                return await store.start("r1", keys, db=db)

        async def finalize(idxs: list[int]) -> set[tuple[str, int]]:
            finals = [FinalItem(batch_id, i, "completed", 200, None, item_event(batch_id, i)) for i in idxs]
            async with writer.use() as db:
                return await store.finalize_many("r1", finals, db=db)

        # Asked together, the (urgent) start goes first, so the finalize finds item 0 running.
        finalized, started = await asyncio.gather(finalize([0]), start())
        assert started == set(keys) and finalized == {(batch_id, 0)}
        assert [row["state"] for row in await items(engine, batch_id)] == ["completed", "running", "running"]
        assert await finalize([1, 2]) == set(keys[1:])
        assert [row["state"] for row in await items(engine, batch_id)] == ["completed"] * 3
    finally:
        await writer.close()
