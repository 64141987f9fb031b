"""The dashboard's per-minute series (relay.control.dashboard.charts.per_minute): a cancelled batch item
is a request but not an error (its owner stopped it), as in the usage summary."""

from __future__ import annotations

from datetime import UTC, datetime

from relay.control.dashboard.charts import per_minute

NOW = datetime(2026, 12, 5, 12, 30, 30, tzinfo=UTC)


def test_cancelled_items_are_requests_but_not_errors() -> None:
    ts = "2026-12-05T12:30:05Z"
    events = [
        {"ts": ts, "status": 200, "error_kind": None},
        {"ts": ts, "status": 0, "error_kind": "cancelled"},
        {"ts": ts, "status": 0, "error_kind": "cancelled"},
        {"ts": ts, "status": 0, "error_kind": "expired"},
        {"ts": ts, "status": 400, "error_kind": "upstream_status"},
    ]
    series = per_minute(events, NOW)
    assert dict(series["requests"])["12:30"] == 5
    assert dict(series["errors"])["12:30"] == 2
