"""The dashboard's formatters (SPEC §16: numbers and times formatted for people), at every magnitude
the pages meet: no exponent, no ``None``, no sub-millisecond latency shown as zero."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from relay.control.dashboard import formats as f


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (7, "7"),
        (999, "999"),
        (10_000, "10k"),
        (62_520, "62.5k"),
        (999_400, "999k"),
        (999_600, "1M"),
        (1_234_567, "1.23M"),
        (10**8, "100M"),
        (10**9, "1B"),
        (1_234_567_890, "1.23B"),
        (3.5e12, "3.5T"),
        (0.5, "0.5"),
        (0.000123, "0.000123"),
        (-62_520, "-62.5k"),
        (None, "–"),
    ],
)
def test_compact_never_prints_an_exponent(value: float | None, text: str) -> None:
    assert f.compact(value) == text
    assert "e" not in f.compact(value).lower().replace("–", "")


@pytest.mark.parametrize(
    ("value", "text"),
    [(10**4, "10,000"), (62_520, "62,520"), (10**9, "1,000,000,000"), (0, "0"), (None, "–")],
)
def test_count_has_thousands_separators(value: int | None, text: str) -> None:
    assert f.count(value) == text


@pytest.mark.parametrize(
    ("nanos", "text"),
    [
        (None, "–"),
        (0, "$0"),
        (15_000, "$0.000015"),
        (12_345_678, "$0.0123"),
        (1_500_000_000, "$1.50"),
        (1_234_567_000_000_000, "$1,234,567.00"),
    ],
)
def test_usd_in_plain_digits(nanos: int | None, text: str) -> None:
    assert f.usd(nanos) == text


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "–"),
        (0, "0 ms"),
        (0.004, "0.004 ms"),
        (0.42, "0.42 ms"),
        (3.25, "3.25 ms"),
        (12.54, "12.5 ms"),
        (340.2, "340 ms"),
        (1250, "1.25 s"),
    ],
)
def test_latency_keeps_sub_millisecond_precision(ms: float | None, text: str) -> None:
    assert f.latency(ms) == text


def test_pricing_reads_as_a_sentence_and_never_says_none() -> None:
    assert (
        f.pricing({"input": 0.8, "output": 4.0, "cached_input": None}) == "in $0.8 · out $4.00 per 1M tokens"
    )
    assert f.pricing({"input": 0.15, "output": 0.6, "cached_input": 0.075}) == (
        "in $0.15 · out $0.6 · cached $0.075 per 1M tokens"
    )
    assert f.pricing(None) == "not priced"
    assert f.pricing({"input": None}) == "not priced"


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        (
            {"meter": "requests", "limit": 1000, "window": "1m"},
            "1,000 requests per minute (shared by the policy)",
        ),
        (
            {"meter": "tokens", "limit": 2_000_000, "window": "1d", "per": "credential"},
            "2,000,000 tokens per day, per credential",
        ),
        ({"meter": "concurrency", "limit": 8}, "8 concurrent requests (shared by the policy)"),
        (
            {"meter": "cost_usd", "limit": "25", "window": "30d", "per": "project"},
            "$25.00 per 30 days, per project",
        ),
        (
            {"meter": "input_tokens", "limit": 50, "window": "90s"},
            "50 input tokens per 90 seconds (shared by the policy)",
        ),
    ],
)
def test_rule_as_a_sentence(spec: dict[str, object], text: str) -> None:
    assert f.rule(spec) == text


def test_relative_times_both_ways() -> None:
    now = datetime(2026, 12, 6, 7, 0, tzinfo=UTC)
    assert f.relative(now - timedelta(seconds=2), now) == "just now"
    assert f.relative(now - timedelta(seconds=42), now) == "42 s ago"
    assert f.relative((now - timedelta(minutes=5)).isoformat(), now) == "5 min ago"
    assert f.relative("2026-12-06T03:59:59.123456Z", now) == "3 h ago"
    assert f.relative(now + timedelta(days=3), now) == "in 3 days"
    assert f.relative(None, now) == "–"


def test_absolute_times_drop_microseconds() -> None:
    assert f.when("2026-12-06T06:55:10.123456Z") == "2026-12-06 06:55:10 UTC"
    assert f.iso("2026-12-06T06:55:10.123456+00:00") == "2026-12-06T06:55:10Z"
    assert f.iso(None) == ""


@pytest.mark.parametrize(
    ("part", "whole", "text"),
    [(1, 2000, "0.05%"), (1999, 2000, "99.95%"), (1, 2, "50%"), (0, 5, "0%"), (5, 5, "100%"), (1, 0, "–")],
)
def test_share_never_rounds_to_an_untrue_zero_or_hundred(part: int, whole: int, text: str) -> None:
    assert f.share(part, whole) == text
