"""``rfc3339``: the one timestamp rendering of every Relay API (UTC, ``Z``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from relay.domain.times import rfc3339


def test_an_aware_utc_value_ends_in_z() -> None:
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, 600000, tzinfo=UTC)) == "2026-01-02T03:04:05.600000Z"


def test_a_naive_value_is_taken_as_utc() -> None:
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"


def test_another_zone_is_converted_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=plus_two)) == "2026-01-02T01:04:05Z"


def test_none_stays_none() -> None:
    assert rfc3339(None) is None
