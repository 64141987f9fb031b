"""The usage insert's own SQLite timestamp step writes exactly what SQLAlchemy's step for the column
writes, for any timestamp (any zone, no microseconds, years before 1000), and is the one used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects.sqlite import aiosqlite

from relay.store import tables as t
from relay.store.usage import _bulk_insert, _sqlite_utc_text

DIALECT = aiosqlite.dialect()
SQLALCHEMYS = t.usage_events.c.ts.type.dialect_impl(DIALECT).bind_processor(DIALECT)
ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=-5)), timezone(timedelta(hours=5, minutes=30))])


@given(st.datetimes(timezones=ZONES))
def test_the_fast_step_writes_what_sqlalchemy_writes(value: datetime) -> None:
    assert SQLALCHEMYS is not None
    assert _sqlite_utc_text(value) == SQLALCHEMYS(value)


def test_none_stays_none_and_the_insert_uses_the_fast_step() -> None:
    assert _sqlite_utc_text(None) is None
    steps = dict(_bulk_insert(DIALECT).converted)
    ts_position = [c.name for c in t.usage_events.columns].index("ts")
    assert steps[ts_position] is _sqlite_utc_text
    value = datetime(2026, 12, 7, 4, 42, 10, tzinfo=UTC)
    assert _sqlite_utc_text(value) == "2026-12-07 04:42:10.000000" == SQLALCHEMYS(value)  # type: ignore[misc]
