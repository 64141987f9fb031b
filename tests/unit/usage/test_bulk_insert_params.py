"""A ``UTCDateTime``'s step for statements on the driver itself (the usage insert, a batch item's claim
and finalize on SQLite) writes exactly what SQLAlchemy's own step writes, for any timestamp (any zone,
naive, no microseconds, years before 1000), and the usage insert uses it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite

from relay.store import tables as t
from relay.store.columns import _sqlite_utc_text, utc_bind_step
from relay.store.usage import bulk_insert

SQLITE = aiosqlite.dialect()
SQLALCHEMYS = t.usage_events.c.ts.type.dialect_impl(SQLITE).bind_processor(SQLITE)
ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=-5)), timezone(timedelta(hours=5, minutes=30))])


@given(st.datetimes(timezones=ZONES))
def test_the_sqlite_step_writes_what_sqlalchemy_writes(value: datetime) -> None:
    assert SQLALCHEMYS is not None
    assert utc_bind_step(SQLITE)(value) == SQLALCHEMYS(value)


def test_sqlite_gets_the_one_call_step_and_the_usage_insert_uses_it() -> None:
    assert utc_bind_step(SQLITE) is _sqlite_utc_text
    assert _sqlite_utc_text(None) is None
    ts_position = [c.name for c in t.usage_events.columns].index("ts")
    assert dict(bulk_insert(SQLITE).converted)[ts_position] is _sqlite_utc_text
    value = datetime(2026, 12, 7, 4, 42, 10, tzinfo=UTC)
    assert _sqlite_utc_text(value) == "2026-12-07 04:42:10.000000" == SQLALCHEMYS(value)  # type: ignore[misc]


def test_postgres_keeps_sqlalchemys_step() -> None:
    postgres = asyncpg.dialect()
    step = utc_bind_step(postgres)
    assert step is not _sqlite_utc_text
    zoned = datetime(2026, 12, 7, 4, 42, 10, tzinfo=timezone(timedelta(hours=-5)))
    assert step(zoned) == zoned.astimezone(UTC) and step(zoned).tzinfo is UTC
