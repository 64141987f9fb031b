"""SQL for usage events, captured payloads and the settings rows the usage API writes.

What it does. Inserts events and payloads in bulk (one ``executemany`` per table, inside the caller's
transaction), aggregates them per group, and reads and upserts ``settings`` rows (reading events newest
first, a page at a time, is ``relay.store.usage_pagination``). Every SQLite/Postgres difference of these
queries lives here: the UTC day of a timestamp, percentiles, and the settings upsert.

What it deliberately does not know. Event construction, pricing and queueing (``relay.usage.event``,
``relay.usage.writer``), HTTP parameter parsing (``relay.control.services.usage``), names of
catalog objects (callers resolve names to ids first: events record ids only, and keep them after the
objects are deleted).

Invariants. Percentiles are ``percentile_cont`` (linear interpolation) on both backends: Postgres
computes them in SQL; SQLite has no percentile aggregate, so they are computed here from the group's
latencies, which is linear in the number of matching events — fine at the embedded (single-process)
scale SQLite serves, and the reason production deployments (Postgres) never pull rows into Python.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Table,
    and_,
    case,
    func,
    insert,
    literal_column,
    not_,
    or_,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t
from relay.store import usage_rollup
from relay.store.catalog import Row
from relay.store.columns import UTCDateTime, utc_bind_step
from relay.store.driver import driver_connection, pg_driver

GROUPS: Final[Mapping[str, str]] = {
    "source": "source",
    "model": "model",
    "project": "project_id",
    "team": "team_id",
    "policy": "policy_id",
    "host": "host",
    "credential": "credential_id",  # a relay key id or an inference token's jti
    "day": "",  # computed per dialect: the UTC date, YYYY-MM-DD
    "hour": "",  # the UTC hour, YYYY-MM-DDTHH
    "minute": "",  # the UTC minute, YYYY-MM-DDTHH:MM (the dashboard's last-hour charts)
}
# Time buckets: (Postgres to_char pattern, SQLite strftime pattern).
BUCKETS: Final[Mapping[str, tuple[str, str]]] = {
    "day": ("YYYY-MM-DD", "%Y-%m-%d"),
    "hour": ('YYYY-MM-DD"T"HH24', "%Y-%m-%dT%H"),
    "minute": ('YYYY-MM-DD"T"HH24:MI', "%Y-%m-%dT%H:%M"),
}
STATUS_CLASSES: Final = ("2xx", "4xx", "5xx")

_E = t.usage_events
_EQUALITY: Final = (
    "source",
    "project_id",
    "team_id",
    "policy_id",
    "model",
    "host",
    "principal_id",
    "credential_id",
    "batch_id",
)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a query covers; None means "any". ``ts_from`` is inclusive, ``ts_to`` exclusive.

    ``status_class`` matches the recorded upstream status (``5xx`` is 500–599): an event whose upstream
    was never reached (status 0) is in no class; ``status=0`` or ``error=True`` finds those.
    """

    source: str | None = None
    project_id: str | None = None
    team_id: str | None = None
    policy_id: str | None = None
    model: str | None = None
    host: str | None = None
    principal_id: str | None = None
    credential_id: str | None = None
    batch_id: str | None = None
    status_class: str | None = None
    status: int | None = None
    error: bool | None = None
    ts_from: datetime | None = None
    ts_to: datetime | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = []
        for column in _EQUALITY:
            value = getattr(self, column)
            if value is not None:
                out.append(_E.c[column] == value)
        if self.status_class is not None:
            low = int(self.status_class[0]) * 100
            out.append(and_(_E.c.status >= low, _E.c.status < low + 100))
        if self.status is not None:
            out.append(_E.c.status == self.status)
        if self.error is not None:
            out.append(is_error() if self.error else not_(is_error()))
        # In UTC: SQLite stores timestamps as UTC text and binds an aware datetime by its wall clock.
        if self.ts_from is not None:
            out.append(_E.c.ts >= self.ts_from.astimezone(UTC))
        if self.ts_to is not None:
            out.append(_E.c.ts < self.ts_to.astimezone(UTC))
        return out


def is_error() -> ColumnElement[bool]:
    """An event is an error when the upstream did not answer 2xx (0 included) or an error was recorded
    — but not a cancelled batch item: the owner stopped it, nothing failed (a batch cancelled at 768 of
    3 000 items is not a 74 % error rate). Those are counted apart (:func:`is_cancelled`)."""
    return and_(
        or_(_E.c.status < 200, _E.c.status >= 300, _E.c.error_kind.is_not(None)),
        or_(_E.c.error_kind.is_(None), _E.c.error_kind != CANCELLED_KIND),
    )


CANCELLED_KIND = "cancelled"
"""The ``error_kind`` of a batch item a cancel stopped or never started (``usage.event.cancelled_event``)."""


def is_cancelled() -> ColumnElement[bool]:
    return _E.c.error_kind == CANCELLED_KIND


# -- writes --------------------------------------------------------------------------------------------


class EventRecord(Protocol):
    """A usage event as the store writes it (``relay.usage.event.UsageEvent``, which sits above the store):
    one attribute per ``usage_events`` column, caller-influenced strings already clipped to their
    columns. The insert reads every column through one compiled getter; these are the ones the store
    reads by name too (the rollup's key and sums)."""

    @property
    def ts(self) -> datetime: ...
    @property
    def source(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def cost_nanos(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class _BulkInsert:
    """``INSERT INTO <table>`` compiled once for one dialect, with positional parameters, read from
    records with one attribute per column (``usage_events``: a usage event; ``payloads``: a capture)."""

    sql: str
    values: Callable[[Any], tuple[Any, ...]]  # a record's values in parameter order (its attributes)
    ts_position: int
    converted: tuple[tuple[int, Callable[[Any], Any]], ...]  # (position, the column type's bind step)

    def params(self, event: Any) -> tuple[Any, ...]:
        row_values = list(self.values(event))
        row_values[self.ts_position] = event.ts.astimezone(UTC)
        for position, step in self.converted:
            row_values[position] = step(row_values[position])
        return tuple(row_values)


_BULK_INSERTS: dict[tuple[str, str, str], _BulkInsert] = {}


def bulk_insert(dialect: Dialect, table: Table = _E) -> _BulkInsert:
    key = (table.name, dialect.name, dialect.driver)
    bulk = _BULK_INSERTS.get(key)
    if bulk is None:
        compiled = insert(table).compile(dialect=dialect)
        names = tuple(compiled.positiontup or ())
        if len(names) != len(table.columns):  # a named paramstyle: no positional form to reuse
            raise RuntimeError(f"{dialect.name}+{dialect.driver}: insert parameters are not positional")
        converted = []
        for position, name in enumerate(names):
            column_type = table.c[name].type
            step: Callable[[Any], Any] | None = (
                utc_bind_step(dialect)  # the same value as SQLAlchemy's step, cheaper on SQLite
                if isinstance(column_type, UTCDateTime)
                else column_type.dialect_impl(dialect).bind_processor(dialect)
            )
            if step is not None:
                converted.append((position, _none_once(step)))
        bulk = _BulkInsert(str(compiled), operator.attrgetter(*names), names.index("ts"), tuple(converted))
        _BULK_INSERTS[key] = bulk
    return bulk


def _none_once(step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``step``, with what it makes of None computed once: a JSON column's step serialises None to
    ``'null'`` with ``json.dumps`` on every row, and most events have no guardrails."""
    none = step(None)
    if none is None:
        return step
    return lambda value: none if value is None else step(value)


async def insert_events(conn: AsyncConnection, events: Sequence[EventRecord]) -> None:
    """Insert events as one executemany in the caller's transaction, and add them to ``usage_rollup``
    in one aggregated upsert (``relay.store.usage_rollup``).

    Live traffic writes an event per request, and ``conn.execute(insert(...), dicts)`` spends ≈ 25 µs
    per row on the event loop's thread turning each dict into parameters, column by column: 55 rows
    every 50 ms at 1 100 req/s held the loop for ≈ 1.5 ms per write, visible in every request's p99.
    So the statement is compiled once per dialect, and each event's attributes become a tuple in one
    C call (no dict per event); only the columns whose type has a bind step (the timestamp, the
    booleans, the JSON) are converted, by that same step SQLAlchemy would run. The driver gets exactly
    the parameters ``conn.execute`` would give it for the event's row (``UsageEvent.to_row``).
    """
    if events:
        bulk = bulk_insert(conn.dialect)
        await conn.exec_driver_sql(bulk.sql, [bulk.params(event) for event in events])
        await usage_rollup.add(conn, events)  # the rollup's sums move with the events, same transaction


async def insert_events_on_driver(conn: AsyncConnection, events: Sequence[EventRecord]) -> None:
    """:func:`insert_events` with the statements on the driver itself, for a caller inside a write
    transaction (the batch finalizer). SQLite: one hop to aiosqlite's thread instead of three (cursor,
    executemany, close), each waiting for the GIL while the event loop is busy. Postgres: asyncpg's
    ``executemany`` under the caller's transaction (``relay.store.driver``), without SQLAlchemy's
    per-execution work; the parameters are those ``conn.execute`` would give the driver (the same
    compiled text and bind steps). Outside a transaction it is :func:`insert_events`."""
    if not events:
        return
    if not conn.in_transaction() or (conn.dialect.name, conn.dialect.driver) not in _ON_DRIVER:
        await insert_events(conn, events)
        return
    bulk = bulk_insert(conn.dialect)
    if conn.dialect.name == "postgresql":
        raw = await pg_driver(conn)
    else:
        raw = await driver_connection(conn)
    await raw.executemany(bulk.sql, [bulk.params(event) for event in events])
    await usage_rollup.add_on_driver(conn, events)


_ON_DRIVER: Final = {("sqlite", "aiosqlite"), ("postgresql", "asyncpg")}


async def get_payload(conn: AsyncConnection, request_id: str) -> Row | None:
    row = (await conn.execute(select(t.payloads).where(t.payloads.c.request_id == request_id))).first()
    return dict(row._mapping) if row else None


async def get_setting(conn: AsyncConnection, key: str) -> Any | None:
    result = await conn.execute(select(t.settings.c.value).where(t.settings.c.key == key))
    return result.scalar()


async def put_setting(conn: AsyncConnection, key: str, value: Any, at: datetime) -> None:
    """Insert or replace one settings row (an upsert, so two first writers cannot collide)."""
    values = {"key": key, "value": value, "updated_at": at}
    if conn.dialect.name == "postgresql":
        pg = pg_insert(t.settings).values(**values)
        await conn.execute(
            pg.on_conflict_do_update(index_elements=["key"], set_={"value": value, "updated_at": at})
        )
    else:
        lite = sqlite_insert(t.settings).values(**values)
        await conn.execute(
            lite.on_conflict_do_update(index_elements=["key"], set_={"value": value, "updated_at": at})
        )


# -- summary -----------------------------------------------------------------------------------------------


def group_column(dialect: str, group_by: str) -> ColumnElement[Any]:
    column = GROUPS[group_by]
    if column:
        return _E.c[column]
    # Literal SQL, not bind parameters: Postgres only matches the GROUP BY expression to the SELECT one
    # when both are textually identical, and two bind parameters ($1, $2) are not.
    pg_pattern, sqlite_pattern = BUCKETS[group_by]
    if dialect == "postgresql":
        utc = func.timezone(literal_column("'UTC'"), _E.c.ts)
        return func.to_char(utc, literal_column(f"'{pg_pattern}'"))
    # SQLite stores these timestamps as UTC text 'YYYY-MM-DD HH:MM:SS.ffffff'.
    return func.strftime(literal_column(f"'{sqlite_pattern}'"), _E.c.ts)


async def summary(
    conn: AsyncConnection, group_by: str, filters: EventFilter, *, latency: bool = True
) -> list[Row]:
    """Per group: requests, errors, cancelled (batch items a cancel stopped: not errors), token sums,
    cost (NULL when no event of the group was priced),
    p50/p95 latency (skipped with ``latency=False``: a caller that shows none, like the dashboard's
    overview, does not pay the sort). Groups come sorted by their key (days oldest first)."""
    if group_by not in GROUPS:
        raise ValueError(f"unknown group {group_by!r}")
    postgres = conn.dialect.name == "postgresql"
    group = group_column(conn.dialect.name, group_by)
    measures: list[Any] = [
        group.label("group"),
        func.count().label("requests"),
        func.sum(case((is_error(), 1), else_=0)).label("errors"),
        func.sum(case((is_cancelled(), 1), else_=0)).label("cancelled"),
        func.sum(_E.c.input_tokens).label("input_tokens"),
        func.sum(_E.c.output_tokens).label("output_tokens"),
        func.sum(_E.c.cached_input_tokens).label("cached_input_tokens"),
        func.sum(_E.c.cost_nanos, type_=BigInteger).label("cost_nanos"),
    ]
    if postgres and latency:
        measures.append(func.percentile_cont(0.5).within_group(_E.c.latency_ms).label("p50_latency_ms"))
        measures.append(func.percentile_cont(0.95).within_group(_E.c.latency_ms).label("p95_latency_ms"))
    where = filters.conditions()
    query = select(*measures).where(*where).group_by(group).order_by(group)
    rows = [_summary_row(r._mapping) for r in await conn.execute(query)]
    if not postgres and latency:
        latencies = await _latencies(conn, group, where)
        for row in rows:
            values = latencies.get(row["group"], [])
            row["p50_latency_ms"] = percentile(values, 0.5)
            row["p95_latency_ms"] = percentile(values, 0.95)
    return rows


def _summary_row(mapping: Mapping[Any, Any]) -> Row:
    # Postgres sums bigint into numeric (Decimal); the API speaks integers.
    row = dict(mapping)
    for key in (
        "requests",
        "errors",
        "cancelled",
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cost_nanos",
    ):
        if row[key] is not None:
            row[key] = int(row[key])
    for key in ("p50_latency_ms", "p95_latency_ms"):
        if row.get(key) is not None:
            row[key] = float(row[key])
    return row


async def _latencies(
    conn: AsyncConnection, group: ColumnElement[Any], where: list[ColumnElement[bool]]
) -> dict[Any, list[int]]:
    """SQLite only: every matching latency per group, sorted, streamed in one ordered scan."""
    query = select(group.label("group"), _E.c.latency_ms).where(*where).order_by(group, _E.c.latency_ms)
    out: dict[Any, list[int]] = {}
    result = await conn.stream(query)
    async for key, latency in result:
        out.setdefault(key, []).append(int(latency))
    return out


def percentile(sorted_values: Sequence[int], fraction: float) -> float | None:
    """``percentile_cont``: linear interpolation between the two nearest ranks of sorted values."""
    if not sorted_values:
        return None
    position = fraction * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return float(sorted_values[low] + (sorted_values[high] - sorted_values[low]) * weight)
