"""``usage_rollup`` on real SQLite and Postgres: the summaries it answers are exactly the raw ones (every
grouping, the filters, bucket boundaries, ranges starting and ending inside a minute or an hour, a
session time zone that is not UTC), it is what is read, and every write path keeps it equal to the
events' sums."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select
from sqlalchemy import insert as sa_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from typer.testing import CliRunner

from relay.cli.main import app
from relay.store import tables as t
from relay.store import usage as store
from relay.store import usage_rollup, usage_summaries
from relay.store.engine import create_engine
from relay.store.rollup_tables import KEY
from relay.store.write_errors import refused as refused_error
from relay.usage.event import UsageEvent
from tests.fixtures.relay_server import MASTER_KEY
from tests.integration.usage.helpers import batch_event, make_event

T0 = datetime(2026, 3, 1, 23, 58, 0, tzinfo=UTC)  # two minutes before a day (and hour) boundary
US = timedelta(microseconds=1)


def dataset() -> list[UsageEvent]:
    """Events on and around minute, hour and day boundaries, one before 1970 (negative minutes), with
    every outcome, priced and unpriced, on several projects, models, credentials, hosts and sources."""
    offsets = [
        timedelta(0),
        US,
        timedelta(seconds=29, microseconds=500_000),
        timedelta(minutes=1) - US,
        timedelta(minutes=1),
        timedelta(minutes=1, seconds=30),
        timedelta(minutes=2) - US,  # 23:59:59.999999
        timedelta(minutes=2),  # midnight
        timedelta(minutes=2, seconds=1),
        timedelta(minutes=3, seconds=45),
        timedelta(hours=2, minutes=30),  # inside whole hours: read from hour rows
        timedelta(hours=5, minutes=7, seconds=3),
    ]
    kinds: list[dict[str, Any]] = [
        {},
        {"status": 500, "error_kind": "upstream_status"},
        {"status": 429, "error_kind": "upstream_status", "cost_nanos": None},
        {"status": 0, "error_kind": "model_not_found", "cost_nanos": None},
        {"status": 200, "cost_nanos": None},
        {"project_id": "prj_b", "team_id": "tm_b", "model": "other", "credential_id": "key_b"},
        {"host": "anthropic", "principal_id": "usr_1", "policy_id": "pol_b", "cached_input_tokens": 3},
    ]
    events = []
    for n, (offset, kind) in enumerate(itertools.product(offsets, kinds)):
        events.append(make_event(ts=T0 + offset, input_tokens=n, output_tokens=2 * n, **kind))
    for i, offset in enumerate(offsets[:4]):
        events.append(
            batch_event("bat_r", i, ts=T0 + offset, status=0, error_kind="cancelled", cost_nanos=None)
        )
        events.append(batch_event("bat_r", 10 + i, ts=T0 + offset, cost_nanos=7))
    events.append(make_event(ts=datetime(1969, 12, 31, 23, 59, 30, 1, tzinfo=UTC)))
    return events


RANGES: list[tuple[datetime | None, datetime | None]] = [
    (None, None),
    (T0 + timedelta(seconds=10), None),  # from inside a minute
    (None, T0 + timedelta(minutes=1, seconds=30)),  # to inside a minute, equal to an event's ts
    (T0 + US, T0 + timedelta(minutes=2) - US),  # both inside minutes
    (T0, T0 + timedelta(minutes=2)),  # whole minutes exactly: no raw part
    (T0 + timedelta(minutes=1), T0 + timedelta(minutes=1)),  # empty
    (T0 + timedelta(seconds=1), T0 + timedelta(seconds=50)),  # inside one minute: events only
    (T0 + timedelta(minutes=1) - US, T0 + timedelta(minutes=2) + US),  # edges one microsecond wide
    (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    (datetime(1969, 12, 31, 23, 59, 30, 1, tzinfo=UTC), T0 + timedelta(minutes=2, seconds=1)),
    (T0 + timedelta(minutes=2), T0 + timedelta(hours=6)),  # whole hours, then whole minutes
    (T0 + timedelta(minutes=1, seconds=1), T0 + timedelta(hours=5, minutes=9, seconds=30)),  # all four
    (None, T0 + timedelta(hours=3, minutes=2)),  # hours up to 02:00, minutes to 02:00…02:02 (none)
    (datetime(9999, 12, 31, 23, 59, 30, tzinfo=UTC), None),  # no whole minute can start after it
    (datetime(9999, 12, 31, 23, 58, 30, tzinfo=UTC), None),
]
FILTERS: list[dict[str, Any]] = [
    {},
    {"project_id": "prj_b"},
    {"model": "gpt-test", "status_class": "2xx"},
    {"status_class": "4xx"},
    {"status_class": "5xx", "team_id": "tm_a"},
    {"error": True},
    {"error": False},
    {"status": 0},
    {"source": "batch"},
    {"credential_id": "key_b", "host": "openai"},
    {"principal_id": "usr_1", "policy_id": "pol_b"},
]


async def insert(engine: AsyncEngine, events: list[UsageEvent], chunk: int = 13) -> None:
    """In several flushes, so the rollup's upserts add to rows already there."""
    for start in range(0, len(events), chunk):
        async with engine.begin() as conn:
            await store.insert_events(conn, events[start : start + chunk])


async def both(
    conn: AsyncConnection, group_by: str, filters: store.EventFilter
) -> tuple[list[Any], list[Any]]:
    rolled = await usage_summaries.summary(conn, group_by, filters, latency=False)
    raw = await store.summary(conn, group_by, filters, latency=False)
    return rolled, raw


async def test_every_grouping_filter_and_range_edge_gives_the_raw_rows(engine: AsyncEngine) -> None:
    await insert(engine, dataset())
    compared = 0
    async with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET TIME ZONE 'Asia/Tokyo'")  # labels stay UTC
        for group_by in store.GROUPS:
            for ts_from, ts_to in RANGES:
                filters = store.EventFilter(ts_from=ts_from, ts_to=ts_to)
                rolled, raw = await both(conn, group_by, filters)
                assert rolled == raw, (group_by, ts_from, ts_to)
                compared += len(raw)
        for extra in FILTERS:
            for group_by in ("minute", "day", "credential"):
                for ts_from, ts_to in RANGES[1:4]:
                    filters = store.EventFilter(ts_from=ts_from, ts_to=ts_to, **extra)
                    rolled, raw = await both(conn, group_by, filters)
                    assert rolled == raw, (group_by, extra, ts_from, ts_to)
                    compared += len(raw)
        full = await usage_summaries.summary(conn, "minute", store.EventFilter(ts_from=T0), latency=False)
    assert compared > 300  # the comparisons were of rows, not of empty answers
    # The boundaries landed where they should: 23:59:59.999999 in 23:59, midnight in 00:00.
    minutes = {r["group"]: r["requests"] for r in full}
    assert (minutes["2026-03-01T23:59"], minutes["2026-03-02T00:00"]) == (3 * 7, 2 * 7)


async def test_the_breakdown_gives_the_raw_rows(engine: AsyncEngine) -> None:
    await insert(engine, dataset())
    async with engine.connect() as conn:
        for ts_from, ts_to in RANGES:
            for extra in ({}, {"project_id": "prj_b"}, {"error": True}):
                filters = store.EventFilter(ts_from=ts_from, ts_to=ts_to, **extra)
                rolled = await usage_summaries.by_day_model_project(conn, filters)
                raw = await usage_summaries.by_day_model_project(conn, filters, rollup=False)
                order = ("day", "model", "project_id")
                assert sorted(rolled, key=lambda r: [r[k] for k in order]) == sorted(
                    raw, key=lambda r: [r[k] for k in order]
                )


async def test_whole_minutes_are_read_from_the_rollup_and_edges_from_the_events(engine: AsyncEngine) -> None:
    """Deleting the events behind the rollup's back shows which part answers what: the whole minutes
    still count (the rollup), a partial edge minute does not (the events); percentiles and a batch
    filter read the events."""
    await insert(engine, [make_event(ts=T0 + timedelta(seconds=s)) for s in (5, 65, 125)])
    async with engine.begin() as conn:
        await conn.execute(delete(t.usage_events))
    async with engine.connect() as conn:
        from_mid = store.EventFilter(ts_from=T0 + timedelta(seconds=30))
        rows = await usage_summaries.summary(conn, "source", from_mid, latency=False)
        assert [r["requests"] for r in rows] == [2]  # 23:59 and 00:00 from the rollup, 23:58:30… raw
        assert await usage_summaries.summary(conn, "source", from_mid, latency=True) == []
        assert (
            await usage_summaries.summary(conn, "source", store.EventFilter(batch_id="b"), latency=False)
            == []
        )


async def rollup_rows(conn: AsyncConnection) -> list[tuple[Any, ...]]:
    found = await conn.execute(select(t.usage_rollup).order_by(*(t.usage_rollup.c[k] for k in KEY)))
    return [tuple(r) for r in found]


async def expected_rows(conn: AsyncConnection) -> list[tuple[Any, ...]]:
    """What the rollup must hold: the stored events summed per key."""
    events = list(await conn.execute(select(t.usage_events)))
    return usage_rollup.aggregate(events)


async def test_every_write_path_keeps_the_rollup_equal_to_the_events(engine: AsyncEngine) -> None:
    events = dataset()
    await insert(engine, events[:40], chunk=7)
    async with engine.begin() as conn:  # the batch finalizer's path (on SQLite: the driver itself)
        await store.insert_events_on_driver(conn, events[40:])
    async with engine.begin() as conn:
        assert await rollup_rows(conn) == await expected_rows(conn)
        before = await rollup_rows(conn)
        await usage_rollup.rebuild(conn)
        assert await rollup_rows(conn) == before


async def test_a_refused_batch_leaves_the_rollup_untouched(engine: AsyncEngine) -> None:
    """Events and their sums commit or roll back together: a duplicate id fails the whole flush."""
    first = make_event(ts=T0)
    await insert(engine, [first])
    with pytest.raises(Exception) as refused:
        async with engine.begin() as conn:
            await store.insert_events(conn, [make_event(ts=T0), first])
    assert refused_error(refused.value)
    async with engine.connect() as conn:
        assert await rollup_rows(conn) == await expected_rows(conn)
        assert [r[len(KEY)] for r in await rollup_rows(conn)] == [1, 1]  # its minute and its hour


def test_relay_migrate_rebuilds_a_rollup_that_missed_events(migrated_url: str) -> None:
    """Events an older replica wrote without their rollup rows (the rolling-upgrade caveat) are counted
    again after ``relay migrate --rebuild-usage-rollup``."""
    events = dataset()

    async def write_without_rollup() -> None:
        engine = create_engine(migrated_url)
        try:
            async with engine.begin() as conn:
                for table in (t.usage_events, t.usage_rollup):
                    await conn.execute(delete(table))
                await conn.execute(sa_insert(t.usage_events), [e.to_row() for e in events])
        finally:
            await engine.dispose()

    async def compared() -> tuple[list[Any], list[Any]]:
        engine = create_engine(migrated_url)
        try:
            async with engine.connect() as conn:
                return await rollup_rows(conn), await expected_rows(conn)
        finally:
            await engine.dispose()

    asyncio.run(write_without_rollup())
    rows, expected = asyncio.run(compared())
    assert rows == [] and len(expected) > 10
    env = {"RELAY_DATABASE_URL": migrated_url, "RELAY_MASTER_KEY": MASTER_KEY, "RELAY_ADMIN_TOKEN": "a" * 32}
    result = CliRunner().invoke(app, ["migrate", "--rebuild-usage-rollup"], env=env)
    assert result.exit_code == 0, result.output
    rows, expected = asyncio.run(compared())
    assert rows == expected
