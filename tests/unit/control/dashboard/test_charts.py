"""The dashboard's charts (relay.control.dashboard.charts): the last hour laid out from the usage
summary's per-minute rows (a minute without events is a zero bar, a row outside the hour is not drawn),
and values written for people (``62.5k``, ``$0.0123``), never ``6.252e+04``."""

from __future__ import annotations

from datetime import UTC, datetime

from relay.control.dashboard.charts import bars, hbars, per_minute

NOW = datetime(2026, 12, 5, 12, 30, 30, tzinfo=UTC)


def test_the_hour_is_laid_out_from_summary_rows() -> None:
    rows = [
        {
            "group": "2026-12-05T12:30",
            "requests": 62_520,
            "errors": 3,
            "input_tokens": 10,
            "output_tokens": 5,
            "cost_nanos": 12_345_678,
        },
        {
            "group": "2026-12-05T11:31",
            "requests": 7,
            "errors": 0,
            "input_tokens": 1,
            "output_tokens": 1,
            "cost_nanos": None,
        },
        {
            "group": "2026-12-05T11:00",
            "requests": 99,
            "errors": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_nanos": None,
        },  # outside the last 60 minutes
    ]
    series = per_minute(rows, NOW)
    assert series["requests"][0][0] == "11:31"
    assert len(series["requests"]) == 60
    requests = dict(series["requests"])
    assert requests["12:30"] == 62_520 and requests["11:31"] == 7 and requests["12:00"] == 0
    assert "11:00" not in requests
    assert dict(series["errors"])["12:30"] == 3
    assert dict(series["tokens"])["12:30"] == 15
    assert dict(series["cost"])["12:30"] == 0.012345678


def test_values_are_written_for_people() -> None:
    chart = bars("Requests", [("12:00", 62_520.0), ("12:01", 1_000.0)])
    assert chart.fmt(chart.peak) == "62.5k" and chart.fmt(chart.total) == "63.5k"
    money = hbars("Cost", [("gpt", 0.012345678), ("claude", 1234.5)], unit="usd")
    assert [money.fmt(b.value) for b in money.bars] == ["$1,234.50", "$0.0123"]
    assert bars("Nothing", [("12:00", 0.0)]).empty
