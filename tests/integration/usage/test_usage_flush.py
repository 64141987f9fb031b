"""One flush of the live usage writer (``relay.store.usage_flush``) on real databases: what it writes is
what the SQLAlchemy statements write, it is all or nothing, a refusal reads as one, and the connection
stays usable after it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import delete, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store import usage, usage_rollup
from relay.store.driver import driver_connection
from relay.store.usage_flush import write_flush
from relay.store.write_errors import refused
from relay.usage.capture import PayloadRecord
from tests.integration.usage.helpers import make_event


def captured(request_id: str) -> PayloadRecord:
    return PayloadRecord(
        request_id=request_id,
        ts=datetime.now(UTC),
        request_body=b'{"messages": []}',
        response_body=b"data: {}\n\n",
        response_truncated=True,
    )


async def table(engine: AsyncEngine, which: Any) -> list[tuple[Any, ...]]:
    async with engine.connect() as conn:
        query = select(*which) if isinstance(which, list) else select(which)
        return sorted(tuple(row) for row in (await conn.execute(query)).all())


async def count(engine: AsyncEngine, which: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(which))).scalar_one())


async def test_a_flush_writes_its_events_their_rollup_sums_and_its_payloads(engine: AsyncEngine) -> None:
    events = [
        make_event(minutes=n % 3, status=500 if n % 4 == 0 else 200, error_kind="x" if n % 4 == 0 else None)
        for n in range(12)
    ]
    payloads = [captured(events[0].request_id), captured(events[5].request_id)]
    async with engine.connect() as conn:
        await write_flush(conn, events[:7], payloads)
        await write_flush(conn, events[7:], [])  # the same connection, a second flush
    assert await count(engine, t.usage_events) == 12
    stored_ids = {row[0] for row in await table(engine, t.usage_events.c.id)}
    assert stored_ids == {event.id for event in events}
    columns = t.payloads.c
    kept = columns.request_id, columns.request_body, columns.response_body
    truncated = columns.request_truncated, columns.response_truncated
    assert await table(engine, [*kept, *truncated]) == sorted(
        (p.request_id, p.request_body, p.response_body, False, True) for p in payloads
    )
    summed = await table(engine, t.usage_rollup)
    rollup = t.usage_rollup.c
    async with engine.connect() as conn:
        minutes = select(func.sum(rollup.requests)).where(rollup.width == 1)
        assert (await conn.execute(minutes)).scalar_one() == 12
    async with engine.begin() as conn:
        await usage_rollup.rebuild(conn)  # the sums recomputed from the events themselves
    assert summed == await table(engine, t.usage_rollup)


async def test_every_write_path_stores_the_same_rows_and_rollup_sums(engine: AsyncEngine) -> None:
    """The live writer's flush (on SQLite, one call on the driver's thread), the finalizer's insert on
    the driver and ``insert_events`` through SQLAlchemy store the same 300 events, every column, and
    the same rollup sums."""
    events = [
        make_event(minutes=n % 4, guardrails=[{"guardrail": "g", "action": "redact"}] if n % 9 == 0 else None)
        for n in range(300)
    ]
    stored: list[list[tuple[Any, ...]]] = []
    for way in ("flush", "on driver", "sqlalchemy"):
        async with engine.begin() as conn:
            await conn.execute(delete(t.usage_events))
            await conn.execute(delete(t.usage_rollup))
        if way == "flush":
            async with engine.connect() as conn:
                await write_flush(conn, events, [])
        else:
            async with engine.begin() as conn:
                write = usage.insert_events_on_driver if way == "on driver" else usage.insert_events
                await write(conn, events)
        stored.append([*await table(engine, list(t.usage_events.c)), *await table(engine, t.usage_rollup)])
    assert len(stored[0]) > 300
    assert stored[0] == stored[1] == stored[2]


async def test_a_refused_flush_leaves_nothing_and_its_connection_usable(engine: AsyncEngine) -> None:
    first = make_event()
    async with engine.connect() as conn:
        await write_flush(conn, [first], [])
        before = (await table(engine, t.usage_rollup), await count(engine, t.payloads))
        again = [make_event(), make_event(id=first.id)]  # a duplicate key: the database refuses the rows
        with pytest.raises(IntegrityError) as refusal:
            await write_flush(conn, again, [captured(again[0].request_id)])
        assert refused(refusal.value)
        assert await count(engine, t.usage_events) == 1  # nothing of the refused flush stayed
        assert (await table(engine, t.usage_rollup), await count(engine, t.payloads)) == before
        await write_flush(conn, [again[0]], [])  # the same connection writes the next flush
    assert await count(engine, t.usage_events) == 2


async def test_a_flush_on_a_closed_connection_is_an_outage_not_a_refusal(engine: AsyncEngine) -> None:
    """The writer keeps its connection between flushes; one closed under it must be retried on a new
    connection, never taken for rows the database refused (which are dropped)."""
    async with engine.connect() as conn:
        raw = await driver_connection(conn)
        await raw.close()  # aiosqlite's thread or asyncpg's connection ends under SQLAlchemy
        with pytest.raises(DBAPIError) as outage:
            await write_flush(conn, [make_event()], [])
        assert not refused(outage.value)
        await conn.invalidate()
    assert await count(engine, t.usage_events) == 0
