"""The usage summary's time buckets on real SQLite and Postgres: ``minute`` and ``hour`` groups are
UTC, counted in the database over every event (the dashboard's charts: SPEC §16 "computed on the
server from the whole data"), and ``latency=False`` leaves the percentiles out."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import usage as store
from relay.store import usage_breakdown
from tests.integration.usage.helpers import BASE_TS, make_event


async def test_minute_and_hour_buckets_count_every_event(engine: AsyncEngine) -> None:
    start = BASE_TS.replace(hour=23, minute=58, second=0, microsecond=0)
    # 1 500 events in one minute (more than the old 1 000-event sample), 3 in the next, 1 an hour on.
    events = [make_event(ts=start + timedelta(milliseconds=i)) for i in range(1500)]
    events += [make_event(ts=start + timedelta(minutes=1, seconds=i)) for i in range(3)]
    events.append(make_event(ts=start + timedelta(hours=1)))
    async with engine.begin() as conn:
        await store.insert_events(conn, events)
    async with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET TIME ZONE 'Asia/Tokyo'")  # buckets stay UTC whatever the session
        minutes = await store.summary(conn, "minute", store.EventFilter(), latency=False)
        hours = await store.summary(conn, "hour", store.EventFilter())
    assert [(r["group"], r["requests"]) for r in minutes] == [
        ("2026-03-01T23:58", 1500),
        ("2026-03-01T23:59", 3),
        ("2026-03-02T00:58", 1),
    ]
    assert "p50_latency_ms" not in minutes[0]
    assert [(r["group"], r["requests"]) for r in hours] == [("2026-03-01T23", 1503), ("2026-03-02T00", 1)]
    assert hours[0]["p50_latency_ms"] is not None


async def test_the_overview_breakdown_equals_the_summary_per_grouping(engine: AsyncEngine) -> None:
    """One scan grouped by (day, model, project) rolls up to exactly the summary's rows per day, per
    model and per project, an unpriced group's cost staying null."""
    events = [
        make_event(
            minutes=i * 97,  # across several UTC days
            model=f"m{i % 3}",
            project_id=f"prj_{i % 4}",
            cost_nanos=None if i % 3 == 2 else 1_000 + i,
            status=500 if i % 7 == 0 else 200,
            error_kind="upstream_status" if i % 7 == 0 else None,
        )
        for i in range(120)
    ]
    async with engine.begin() as conn:
        await store.insert_events(conn, events)
    async with engine.connect() as conn:
        rows = await usage_breakdown.by_day_model_project(conn, store.EventFilter())
        for key, group_by in (("day", "day"), ("model", "model"), ("project_id", "project")):
            expected = await store.summary(conn, group_by, store.EventFilter(), latency=False)
            assert usage_breakdown.roll_up(rows, key) == expected, group_by
    assert any(r["cost_nanos"] is None for r in usage_breakdown.roll_up(rows, "model"))
