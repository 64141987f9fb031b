"""Keeping ``usage_rollup`` exact (SPEC §8, §16): what the usage writers add to it and what the retention
sweep subtracts from it, each inside the transaction that inserts or deletes the events.

Why. The overview's summaries over 14 days read every event of the range (seconds at 10 million events);
the rollup holds the same sums per minute and per hour, so they read a few rows per hour instead
(``relay.store.usage_summaries``). That is only right while every event is counted exactly once, so the
rollup moves in the same transaction as the events, never later.

How. :func:`aggregate` sums a flushed batch of event rows per rollup key (each event into its minute row
and its hour row) in Python; :func:`add` writes them as one ``INSERT … ON CONFLICT DO UPDATE`` (on
Postgres one statement over arrays, ``unnest``; on SQLite an executemany compiled once, positional, like
the events' bulk insert), its rows sorted by key so two writers (replicas, the batch finalizer) lock
shared rows in the same order and cannot deadlock. :func:`subtract` is the same upsert with the sums
negated, then deletes the touched rows that reached zero requests, so a summary never shows an empty
group. :func:`rebuild` recomputes the whole table from the events (tests, benchmarks, and an operator
after old replicas wrote events without it: see docs/usage.md).

What it deliberately does not know: how summaries read the rows, or event construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any, Final

from sqlalchemy import and_, delete, or_
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store.driver import driver_connection, pg_driver
from relay.store.rollup_tables import KEY, SUMS, usage_rollup

R = usage_rollup
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
MINUTE: Final = timedelta(minutes=1)
ANSWERED, ERROR, CANCELLED = 0, 1, 2
_CANCELLED_KIND: Final = "cancelled"  # relay.store.usage.CANCELLED_KIND (that module imports this one)

# The events' minute (hour) start and outcome in SQL, for :func:`rebuild` (0024 holds a frozen copy).
_START_SQL: Final = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM date_trunc('{unit}', ts AT TIME ZONE 'UTC')) / 60 AS BIGINT)",
    "sqlite": "CAST(strftime('%s', {prefix}) AS INTEGER) / 60",
}
_UNITS: Final = {1: ("minute", "substr(ts, 1, 16)"), 60: ("hour", "substr(ts, 1, 14) || '00'")}
_OUTCOME_SQL: Final = (
    "CASE WHEN error_kind = 'cancelled' THEN 2"
    " WHEN status < 200 OR status >= 300 OR error_kind IS NOT NULL THEN 1 ELSE 0 END"
)


def minute_of(ts: datetime) -> int:
    """Whole minutes since the epoch, floored (exact: timedelta arithmetic, no float)."""
    return (ts.astimezone(UTC) - EPOCH) // MINUTE


def minute_start(minute: int) -> datetime:
    return EPOCH + minute * MINUTE


def outcome(status: int, error_kind: str | None) -> int:
    """``relay.store.usage.is_error`` / ``is_cancelled`` for one event: the two never overlap."""
    if error_kind == _CANCELLED_KIND:
        return CANCELLED
    if status < 200 or status >= 300 or error_kind is not None:
        return ERROR
    return ANSWERED


# The rollup's dimensions of an event (its key after width and minute, before the outcome), and its tokens.
_DIMENSIONS: Final = attrgetter(
    "source", "project_id", "team_id", "policy_id", "principal_id", "credential_id", "model", "host", "status"
)
_TOKENS: Final = attrgetter("input_tokens", "output_tokens", "cached_input_tokens")


def aggregate(events: Iterable[Any]) -> list[tuple[Any, ...]]:
    """Events summed per rollup key, each into its minute row and its hour row: ``KEY + SUMS`` tuples
    sorted by key. An event is anything with the columns as attributes: a ``UsageEvent`` being written
    (``relay.store.usage.EventRecord``), or a deleted event's row coming back from ``RETURNING``."""
    sums: dict[tuple[Any, ...], list[int]] = {}
    for event in events:
        minute = minute_of(event.ts)
        dimensions = (*_DIMENSIONS(event), outcome(event.status, event.error_kind))
        input_tokens, output_tokens, cached_input_tokens = _TOKENS(event)
        cost = event.cost_nanos
        for key in ((1, minute, *dimensions), (60, minute - minute % 60, *dimensions)):
            found = sums.get(key)
            if found is None:
                found = sums[key] = [0, 0, 0, 0, 0, 0]
            found[0] += 1
            found[1] += input_tokens
            found[2] += output_tokens
            found[3] += cached_input_tokens
            if cost is not None:
                found[4] += cost
                found[5] += 1
    return [(*key, *sums[key]) for key in sorted(sums)]


_UPSERTS: dict[tuple[str, str], str] = {}


def upsert_sql(dialect: Dialect) -> str:
    sql = _UPSERTS.get((dialect.name, dialect.driver))
    if sql is None:
        make = pg_insert if dialect.name == "postgresql" else sqlite_insert
        stmt = make(R)
        stmt = stmt.on_conflict_do_update(
            index_elements=list(KEY), set_={name: R.c[name] + stmt.excluded[name] for name in SUMS}
        )
        compiled = stmt.compile(dialect=dialect)
        if tuple(compiled.positiontup or ()) != (*KEY, *SUMS):
            raise RuntimeError(
                f"{dialect.name}+{dialect.driver}: rollup upsert parameters are not positional"
            )
        sql = _UPSERTS[(dialect.name, dialect.driver)] = str(compiled)
    return sql


# Postgres: the same upsert as one statement over arrays (``unnest``), not one execution per row.
_ARRAY_TYPES: Final = {"width": "smallint", "minute": "bigint", "status": "integer", "outcome": "smallint"}
_PG_UPSERT: Final = (
    f"INSERT INTO usage_rollup ({', '.join((*KEY, *SUMS))}) SELECT * FROM unnest("
    + ", ".join(
        f"${i}::{_ARRAY_TYPES.get(name, 'bigint' if name in SUMS else 'text')}[]"
        for i, name in enumerate((*KEY, *SUMS), 1)
    )
    + f") ON CONFLICT ({', '.join(KEY)}) DO UPDATE SET "
    + ", ".join(f"{name} = usage_rollup.{name} + excluded.{name}" for name in SUMS)
)


async def _upsert(conn: AsyncConnection, found: list[tuple[Any, ...]]) -> None:
    if conn.dialect.name == "postgresql" and conn.dialect.driver == "asyncpg":
        await conn.exec_driver_sql(_PG_UPSERT, tuple(list(column) for column in zip(*found, strict=True)))
    else:
        await conn.exec_driver_sql(upsert_sql(conn.dialect), found)


async def add(conn: AsyncConnection, events: Sequence[Any]) -> None:
    """Add a batch of just-inserted events (:func:`aggregate`), in the caller's transaction."""
    if events:
        await _upsert(conn, aggregate(events))


async def add_on_driver(conn: AsyncConnection, events: Sequence[Any]) -> None:
    """:func:`add` on the driver itself (see ``usage.insert_events_on_driver``): SQLite's executemany,
    or Postgres' one ``unnest`` upsert under ``conn``'s transaction (``relay.store.driver``)."""
    if not events:
        return
    if conn.dialect.name == "postgresql":
        raw = await pg_driver(conn)
        await raw.execute(_PG_UPSERT, *(list(column) for column in zip(*aggregate(events), strict=True)))
        return
    raw = await driver_connection(conn)
    await raw.executemany(upsert_sql(conn.dialect), aggregate(events))


async def subtract(conn: AsyncConnection, rows: Sequence[Any]) -> None:
    """Take just-deleted events out (their rows, :func:`aggregate`), in the caller's transaction; rollup
    rows left with no request go."""
    if not rows:
        return
    found = aggregate(rows)
    size = len(KEY)
    negated = [(*row[:size], *(-value for value in row[size:])) for row in found]
    await _upsert(conn, negated)
    touched = []  # per width, the span of starts touched: a range of the primary key each
    for width in (1, 60):
        starts = [row[1] for row in found if row[0] == width]
        touched.append(and_(R.c.width == width, R.c.minute.between(min(starts), max(starts))))
    await conn.execute(delete(R).where(or_(*touched), R.c.requests <= 0))


async def rebuild(conn: AsyncConnection) -> None:
    """Recompute every row from the events, in the caller's transaction."""
    dimensions = ", ".join(KEY[2:-1])
    await conn.execute(delete(R))
    for width, (unit, prefix) in _UNITS.items():
        start = _START_SQL[conn.dialect.name].replace("{unit}", unit).replace("{prefix}", prefix)
        await conn.exec_driver_sql(
            f"INSERT INTO usage_rollup ({', '.join(KEY)}, {', '.join(SUMS)})"
            f" SELECT {width}, {start}, {dimensions}, {_OUTCOME_SQL},"
            " COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cached_input_tokens),"
            " COALESCE(SUM(cost_nanos), 0), COUNT(cost_nanos)"
            f" FROM usage_events GROUP BY {start}, {dimensions}, {_OUTCOME_SQL}"
        )
