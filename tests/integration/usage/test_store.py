"""``relay.store.usage`` and ``usage_pagination`` on real SQLite and Postgres: inserts, keyset
pagination, filters, summaries, the one-event-per-batch-item invariant, settings and payloads."""

from __future__ import annotations

import base64
from datetime import timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import insert as sa_insert
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store import usage as store
from relay.store import usage_pagination
from relay.store.catalog import utcnow
from relay.store.usage_flush import write_flush
from relay.usage.capture import PayloadRecord
from relay.usage.event import UsageEvent
from tests.integration.usage.helpers import BASE_TS, batch_event, make_event


async def write_event(conn: Any, event: UsageEvent) -> None:
    await store.insert_events(conn, [event])


async def insert(engine: AsyncEngine, events: list[UsageEvent]) -> None:
    async with engine.begin() as conn:
        await store.insert_events(conn, events)


async def query(engine: AsyncEngine, **filters: Any) -> list[str]:
    async with engine.connect() as conn:
        rows, _ = await usage_pagination.query_events(conn, store.EventFilter(**filters), limit=1000)
    return [r["id"] for r in rows]


def newest_first(events: list[UsageEvent]) -> list[str]:
    return [e.id for e in sorted(events, key=lambda e: (e.ts, e.id), reverse=True)]


async def test_the_bulk_insert_stores_exactly_what_sqlalchemys_own_insert_stores(engine: AsyncEngine) -> None:
    """``insert_events`` bypasses SQLAlchemy's per-row parameter processing (a hot-path cost); the
    stored rows must not differ in any column from ``conn.execute(insert(...))`` — timestamps in
    another zone, booleans, NULLs and a batch event included."""
    zone = timezone(timedelta(hours=-5))
    pairs = [
        (make_event(), make_event()),
        (
            make_event(streamed=True, ttft_ms=7, cost_nanos=None),
            make_event(streamed=True, ttft_ms=7, cost_nanos=None),
        ),
        (batch_event("bat_x", 3), batch_event("bat_y", 3)),
        (
            make_event(status=0, error_kind="model_not_found", host_key_id=None, relay_key_hash=None),
            make_event(status=0, error_kind="model_not_found", host_key_id=None, relay_key_hash=None),
        ),
    ]
    for fast, reference in pairs:
        reference.ts = fast.ts = fast.ts.astimezone(zone) + timedelta(microseconds=123457)
    async with engine.begin() as conn:
        await store.insert_events(conn, [fast for fast, _ in pairs])
        await conn.execute(sa_insert(t.usage_events), [reference.to_row() for _, reference in pairs])
    async with engine.connect() as conn:
        # Raw driver rows: what is stored, before any result processing could hide a difference.
        raw = {r[0]: r[1:] for r in (await conn.exec_driver_sql("SELECT * FROM usage_events")).all()}
    columns = [c.name for c in t.usage_events.columns]
    differing = ("id", "request_id", "batch_id")  # the two sides differ only in these, by construction
    compared = [i for i, name in enumerate(columns[1:]) if name not in differing]
    for fast, reference in pairs:
        assert [raw[fast.id][i] for i in compared] == [raw[reference.id][i] for i in compared]


async def test_pages_are_newest_first_without_gaps_or_duplicates_even_when_timestamps_tie(
    engine: AsyncEngine,
) -> None:
    # 23 events over 5 distinct timestamps: ties are broken by id, so the order is total.
    events = [make_event(minutes=i % 5) for i in range(23)]
    await insert(engine, events)
    seen: list[str] = []
    cursor = None
    pages = 0
    async with engine.connect() as conn:
        while True:
            rows, cursor = await usage_pagination.query_events(
                conn, store.EventFilter(), limit=5, cursor=cursor
            )
            seen += [r["id"] for r in rows]
            pages += 1
            if cursor is None:
                break
    assert pages == 5 and seen == newest_first(events)
    assert len(set(seen)) == 23


async def test_an_exactly_full_last_page_has_no_next_cursor(engine: AsyncEngine) -> None:
    await insert(engine, [make_event(minutes=i) for i in range(4)])
    async with engine.connect() as conn:
        rows, cursor = await usage_pagination.query_events(conn, store.EventFilter(), limit=4)
    assert len(rows) == 4 and cursor is None


async def test_rows_round_trip_every_field(engine: AsyncEngine) -> None:
    event = make_event(
        status=0,
        error_kind="model_not_found",
        error_message="model 'x' not found",
        streamed=True,
        cached_input_tokens=3,
        cost_nanos=None,
        ttft_ms=12,
        relay_key_hash=None,
    )
    await insert(engine, [event])
    async with engine.connect() as conn:
        rows, _ = await usage_pagination.query_events(conn, store.EventFilter(), limit=10)
    assert rows == [event.to_row()]


async def test_every_filter(engine: AsyncEngine) -> None:
    ok = make_event(minutes=0)
    failed_upstream = make_event(minutes=1, status=503, error_kind="upstream_error", project_id="prj_b")
    never_reached = make_event(minutes=2, status=0, error_kind="no_keys", model="other", host="")
    client_error = make_event(minutes=3, status=404, team_id="tm_b", policy_id="pol_b", host="anthropic")
    item = batch_event("bat_1", 0, minutes=4, principal_id="usr_b", credential_id="jti_b")
    item_failed = batch_event("bat_1", 1, minutes=5, error_kind="timeout", status=200)
    await insert(engine, [ok, failed_upstream, never_reached, client_error, item, item_failed])

    async def ids(**filters: Any) -> set[str]:
        return set(await query(engine, **filters))

    assert await ids(source="batch") == {item.id, item_failed.id}
    assert await ids(source="live") == {ok.id, failed_upstream.id, never_reached.id, client_error.id}
    assert await ids(project_id="prj_b") == {failed_upstream.id}
    assert await ids(team_id="tm_b") == await ids(policy_id="pol_b") == {client_error.id}
    assert await ids(model="other") == {never_reached.id}
    assert await ids(host="anthropic") == {client_error.id}
    assert await ids(principal_id="usr_b") == await ids(credential_id="jti_b") == {item.id}
    assert await ids(batch_id="bat_1") == {item.id, item_failed.id}
    assert await ids(status_class="2xx") == {ok.id, item.id, item_failed.id}
    assert await ids(status_class="4xx") == {client_error.id}
    assert await ids(status_class="5xx") == {failed_upstream.id}
    assert await ids(status=0) == {never_reached.id}
    assert await ids(error=True) == {failed_upstream.id, never_reached.id, client_error.id, item_failed.id}
    assert await ids(error=False) == {ok.id, item.id}
    start = BASE_TS + timedelta(minutes=1)
    assert await ids(ts_from=start, ts_to=start + timedelta(minutes=2)) == {
        failed_upstream.id,
        never_reached.id,
    }
    assert await ids(source="batch", error=True, batch_id="bat_1") == {item_failed.id}
    assert await ids(project_id="prj_none") == set()


async def test_summary_per_group(engine: AsyncEngine) -> None:
    # Team A: 20 requests with latencies 1..20 ms on two days; one error; costs 1000 each except one unpriced.
    events = [
        make_event(
            minutes=i * 60,  # 12:00 on day one onwards: 12 on day one, 8 on day two
            latency_ms=i + 1,
            cost_nanos=None if i == 0 else 1000,
            status=500 if i == 3 else 200,
            cached_input_tokens=1,
        )
        for i in range(20)
    ]
    # Team B: unpriced only, batch source
    events += [batch_event("bat_s", i, team_id="tm_b", cost_nanos=None, latency_ms=7) for i in range(2)]
    await insert(engine, events)

    async def rows(group_by: str, **filters: Any) -> dict[Any, dict[str, Any]]:
        async with engine.connect() as conn:
            found = await store.summary(conn, group_by, store.EventFilter(**filters))
        return {r["group"]: r for r in found}

    teams = await rows("team")
    assert list(teams) == ["tm_a", "tm_b"]
    a = teams["tm_a"]
    assert (a["requests"], a["errors"], a["input_tokens"], a["output_tokens"]) == (20, 1, 200, 100)
    assert a["cached_input_tokens"] == 20 and a["cost_nanos"] == 19_000 and type(a["cost_nanos"]) is int
    assert a["p50_latency_ms"] == pytest.approx(10.5) and a["p95_latency_ms"] == pytest.approx(19.05)
    b = teams["tm_b"]
    assert (b["requests"], b["errors"], b["cancelled"], b["cost_nanos"]) == (2, 0, 0, None)
    assert b["p50_latency_ms"] == b["p95_latency_ms"] == 7.0

    days = await rows("day", team_id="tm_a")
    assert {k: v["requests"] for k, v in days.items()} == {"2026-03-01": 12, "2026-03-02": 8}
    assert list(days) == sorted(days)
    assert {k: v["requests"] for k, v in (await rows("source")).items()} == {"batch": 2, "live": 20}
    for group_by, key in (
        ("model", "gpt-test"),
        ("project", "prj_a"),
        ("policy", "pol_a"),
        ("host", "openai"),
    ):
        assert (await rows(group_by))[key]["requests"] == 22
    assert await rows("team", project_id="nothing") == {}


async def test_cancelled_batch_items_are_not_errors(engine: AsyncEngine) -> None:
    """A batch cancelled at 768 of 3 000 items is not a 74 % error rate: its cancelled items (error_kind
    ``cancelled``, status 0, as ``cancelled_event`` writes them) count apart, never as errors; an item
    that failed or expired still is one."""
    done = [batch_event("bat_c", i, team_id="tm_c") for i in range(3)]
    failed = batch_event("bat_c", 3, team_id="tm_c", status=400, error_kind="upstream_status")
    expired = batch_event("bat_c", 4, team_id="tm_c", status=0, error_kind="expired", cost_nanos=None)
    cancelled = [
        batch_event("bat_c", i, team_id="tm_c", status=0, error_kind="cancelled", cost_nanos=None)
        for i in range(5, 12)
    ]
    await insert(engine, [*done, failed, expired, *cancelled])
    async with engine.connect() as conn:
        [row] = await store.summary(conn, "team", store.EventFilter(team_id="tm_c"))
    assert (row["requests"], row["errors"], row["cancelled"]) == (12, 2, 7)
    assert set(await query(engine, batch_id="bat_c", error=True)) == {failed.id, expired.id}
    assert len(await query(engine, batch_id="bat_c", error=False)) == 3 + 7


async def test_day_is_the_utc_date(engine: AsyncEngine) -> None:
    # 23:30 UTC is the next day in UTC+2 but stays on its own UTC date whatever the session time zone.
    late = make_event(ts=BASE_TS.replace(hour=23, minute=30))
    await insert(engine, [late])
    async with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET TIME ZONE 'Asia/Tokyo'")
        found = await store.summary(conn, "day", store.EventFilter())
    assert [r["group"] for r in found] == ["2026-03-01"]


async def test_a_batch_event_rolls_back_with_the_callers_transaction(engine: AsyncEngine) -> None:
    event = batch_event("bat_rb", 0)
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await write_event(conn, event)
            raise RuntimeError("finalizing the item failed")
    assert await query(engine, batch_id="bat_rb") == []
    async with engine.begin() as conn:
        await write_event(conn, event)
    assert await query(engine, batch_id="bat_rb") == [event.id]


async def test_a_batch_item_can_never_get_two_events(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await write_event(conn, batch_event("bat_u", 0))
        await write_event(conn, batch_event("bat_u", 1))
        await write_event(conn, batch_event("bat_other", 0))
        await write_event(conn, make_event())  # live events have no batch key: never conflict
        await write_event(conn, make_event())
    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await write_event(conn, batch_event("bat_u", 0))
    assert len(await query(engine, batch_id="bat_u")) == 2


async def test_source_and_batch_fields_must_agree(engine: AsyncEngine) -> None:
    for bad in (
        make_event(batch_id="bat_x", batch_idx=0),
        make_event(source="batch"),
        make_event(source="x"),
    ):
        with pytest.raises(IntegrityError):
            async with engine.begin() as conn:
                await write_event(conn, bad)


async def test_settings_upsert(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        assert await store.get_setting(conn, "payload_logging") is None
        await store.put_setting(conn, "payload_logging", {"enabled": True, "max_bytes": 2048}, utcnow())
        await store.put_setting(conn, "payload_logging", {"enabled": False, "max_bytes": 4096}, utcnow())
    async with engine.connect() as conn:
        assert await store.get_setting(conn, "payload_logging") == {"enabled": False, "max_bytes": 4096}
        count = len((await conn.execute(select(t.settings))).all())
    assert count == 1


async def test_payloads(engine: AsyncEngine) -> None:
    row = {
        "request_id": "req-p",
        "ts": utcnow(),
        "request_body": b'{"model": "m"}',
        "response_body": b"\x00\xff binary too",
        "request_truncated": False,
        "response_truncated": True,
    }
    async with engine.connect() as conn:
        await write_flush(conn, [], [PayloadRecord(**row)])  # the live writer's payload insert
        assert await store.get_payload(conn, "req-p") == row
        assert await store.get_payload(conn, "req-none") is None


def test_cursor_round_trip_and_junk() -> None:
    cursor = usage_pagination.encode_cursor(BASE_TS, "ue_1")
    assert usage_pagination.decode_cursor(cursor) == (BASE_TS, "ue_1")
    assert "=" not in cursor and "+" not in cursor and "/" not in cursor
    crafted = [
        base64.urlsafe_b64encode(raw).decode()
        for raw in (
            b"0001-01-01T00:00:00+14:00|ue_1",  # no UTC instant: failed in the query (500)
            b"2026-01-01T00:00:00+00:00|ue_\x00",  # a NUL: Postgres refuses it (500)
            b"2026-01-01T00:00:00+02:00|ue_1",  # parseable, but never issued in this form
            b"2026-01-01|ue_1",
        )
    ]
    for junk in ("", "!!!", "bm90IGEgY3Vyc29y", usage_pagination.encode_cursor(BASE_TS, ""), *crafted):
        with pytest.raises(ValueError):
            usage_pagination.decode_cursor(junk)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [([], 0.5, None), ([5], 0.95, 5.0), ([1, 2], 0.5, 1.5), ([1, 2, 3, 4], 0.95, 3.85), ([1, 3], 0.0, 1.0)],
)
def test_percentile_matches_percentile_cont(
    values: list[int], fraction: float, expected: float | None
) -> None:
    result = store.percentile(values, fraction)
    assert result == (pytest.approx(expected) if expected is not None else None)
