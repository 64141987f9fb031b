"""Migration 0024 (SPEC §8, §16): ``usage_rollup`` is created matching the metadata and filled from the
events already written — per UTC minute and hour (one before 1970 included: floored), outcome (answered,
error, cancelled), priced and unpriced — exactly as the writers would have filled it; a downgrade drops
only that table."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.store import tables as t
from relay.store import usage as store
from relay.store import usage_rollup, usage_summaries
from relay.store.migrate import check_schema, downgrade_to, upgrade_to_head
from relay.store.rollup_tables import KEY
from tests.integration.migrations.helpers import tables


def old_event(n: int, ts: datetime, **overrides: Any) -> dict[str, Any]:
    return {
        "id": f"ue_{n}", "ts": ts, "request_id": f"r{n}", "source": "live", "status": 200,
        "error_kind": None, "model": "m", "upstream_model": "m", "host": "h", "adapter": "openai",
        "inbound_shape": "openai", "attempts": 1, "streamed": False, "input_tokens": n,
        "output_tokens": 2 * n, "cached_input_tokens": n % 2, "cost_nanos": 10 * n, "latency_ms": 1,
        "policy_id": "p", "project_id": "pr", "team_id": "t", "principal_kind": "user",
        "principal_id": "u", "credential_kind": "key", "credential_id": "c", **overrides,
    }  # fmt: skip


CANCELLED: dict[str, Any] = {"status": 0, "error_kind": "cancelled", "cost_nanos": None}
EVENTS = [
    old_event(1, datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)),
    old_event(2, datetime(2026, 3, 1, 12, 0, 59, 999_999, tzinfo=UTC)),
    old_event(3, datetime(2026, 3, 1, 12, 1, 0, tzinfo=UTC), cost_nanos=None),
    old_event(4, datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC), status=500, error_kind="upstream_status"),
    old_event(
        5, datetime(2026, 3, 1, 12, 0, 31, tzinfo=UTC), status=0, error_kind="cancelled", cost_nanos=None
    ),
    old_event(6, datetime(2026, 3, 1, 12, 0, 32, tzinfo=UTC), model="other", project_id="pr2"),
    old_event(7, datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)),
]


async def test_0024_creates_and_fills_the_rollup_from_existing_events(engine: AsyncEngine) -> None:
    await upgrade_to_head(engine)
    await downgrade_to(engine, "0023")
    assert "usage_rollup" not in await tables(engine)
    async with engine.begin() as conn:
        columns = ", ".join(EVENTS[0])
        values = ", ".join(f":{name}" for name in EVENTS[0])
        await conn.execute(text(f"INSERT INTO usage_events ({columns}) VALUES ({values})"), EVENTS)

    await upgrade_to_head(engine)
    assert await check_schema(engine) == []
    async with engine.connect() as conn:
        stored = list(await conn.execute(select(t.usage_events)))
        found = await conn.execute(select(t.usage_rollup).order_by(*(t.usage_rollup.c[k] for k in KEY)))
        rows = [tuple(r) for r in found]
        by_minute = await usage_summaries.summary(conn, "minute", store.EventFilter(), latency=False)
        raw = await store.summary(conn, "minute", store.EventFilter(), latency=False)
    assert rows == usage_rollup.aggregate(stored)  # what the writers would have added
    minute = usage_rollup.minute_of(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    # (minute, cost, priced, requests) in key order: at 12:00 the cancelled item (5, status 0), the
    # answers (1, 2), the error (4), another project's (6); at 12:01 the unpriced one (3).
    assert [(r[1], r[-2], r[-1], r[len(KEY)]) for r in rows if r[0] == 1 and r[1] >= minute] == [
        (minute, 0, 0, 1),
        (minute, 30, 2, 2),
        (minute, 40, 1, 1),
        (minute, 60, 1, 1),
        (minute + 1, 0, 0, 1),
    ]
    # 1969-12-31T23:59:59 is in the minute (and the hour) before the epoch.
    assert [r[:2] for r in rows if r[1] < 0] == [(1, -1), (60, -60)]
    # The hour rows: 12:00 holds the five events of 12:00 and 12:01 in four combinations.
    assert [(r[1], r[len(KEY)]) for r in rows if r[0] == 60 and r[1] >= 0] == [
        (minute, n) for n in (1, 3, 1, 1)
    ]
    assert by_minute == raw and len(raw) == 3

    await downgrade_to(engine, "0023")
    assert "usage_rollup" not in await tables(engine)
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT count(*) FROM usage_events"))).scalar_one() == len(EVENTS)
