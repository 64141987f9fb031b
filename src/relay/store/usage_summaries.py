"""The usage summaries, from ``usage_rollup`` where it can answer them, else from the events (SPEC §8,
§16). Callers (the usage API's summary, the dashboard's overview) call here, never the rollup directly.

When the rollup answers. The request asks no percentiles (a minute's sums cannot give a median) and
filters by nothing the rollup lacks (``batch_id``: see ``relay.store.rollup_tables``). Every grouping
is covered: the dimensions directly, ``day``/``hour``/``minute`` from the bucket.

How a range is split, exactly. ``from`` is inclusive and ``to`` exclusive, to the microsecond, while a
rollup row covers one whole minute or hour. So the whole hours inside ``[from, to)`` are read from the
rollup's hour rows, the whole minutes around them from its minute rows (a per-minute grouping reads
minute rows only), and the partial edge minutes, ``[from, the next whole minute)`` and ``[the last whole
minute, to)``, from the events (by ``ix_usage_events_ts_id``; a minute's events at most). A range inside
one minute is read from the events alone. The parts are one ``UNION ALL`` summed per group in SQL and
ordered by the database, so the rows, their order and their NULLs (cost when nothing was priced) are
those of the raw query (``relay.store.usage.summary``); ``tests/integration/usage/test_rollup.py``
proves it.

Day, hour and minute groups are computed on integer buckets (whole minutes since the epoch, floored),
and only the few summed rows are turned into the ``YYYY-MM-DD…`` labels the raw query makes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import BigInteger, ColumnElement, Select, and_, case, func, literal_column, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from relay.store import tables as t
from relay.store import usage as store
from relay.store import usage_breakdown
from relay.store.catalog import Row
from relay.store.rollup_tables import usage_rollup
from relay.store.usage_rollup import CANCELLED, ERROR, minute_of, minute_start

R = usage_rollup
_E = t.usage_events
SPANS: Final = {"minute": 1, "hour": 60, "day": 1440}  # a time group's width in minutes
LAST_MINUTE: Final = minute_of(datetime.max.replace(tzinfo=UTC))  # 9999-12-31T23:59: none starts later
MEASURES: Final = (
    "requests",
    "errors",
    "cancelled",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_nanos",
)


def covered(filters: store.EventFilter, *, latency: bool) -> bool:
    return not latency and filters.batch_id is None


async def summary(
    conn: AsyncConnection,
    group_by: str,
    filters: store.EventFilter,
    *,
    latency: bool = True,
    rollup: bool = True,
) -> list[Row]:
    """``relay.store.usage.summary``'s rows; from the rollup when it can answer (``rollup=False``:
    never, the raw query)."""
    if group_by not in store.GROUPS:
        raise ValueError(f"unknown group {group_by!r}")
    if not (rollup and covered(filters, latency=latency)):
        return await store.summary(conn, group_by, filters, latency=latency)
    return await _rows(conn, _combined(conn.dialect.name, (group_by,), filters, ("group",), order=True))


async def by_day_model_project(
    conn: AsyncConnection, filters: store.EventFilter, *, rollup: bool = True
) -> list[Row]:
    """``[{day, model, project_id, requests, errors, cancelled, *_tokens, cost_nanos}]`` (unordered),
    the overview's one read of its 14 days (``relay.store.usage_breakdown`` sums it per dimension)."""
    if not (rollup and covered(filters, latency=False)):
        return await usage_breakdown.by_day_model_project(conn, filters)
    query = _combined(conn.dialect.name, ("day", "model", "project"), filters, ("day", "model", "project_id"))
    return await _rows(conn, query)


async def _rows(conn: AsyncConnection, query: Select[Any]) -> list[Row]:
    out = []
    for r in await conn.execute(query):
        row = dict(r._mapping)
        for key in MEASURES:
            if row[key] is not None:
                row[key] = int(row[key])  # Postgres sums bigint into numeric
        out.append(row)
    return out


def _combined(
    dialect: str,
    groups: Sequence[str],
    filters: store.EventFilter,
    names: Sequence[str],
    *,
    order: bool = False,
) -> Select[Any]:
    """The rollup's whole minutes and the events of the partial edge minutes, summed per group."""
    keys = [f"k{i}" for i in range(len(groups))]
    parts: list[Select[Any]] = []
    lo = hi = None  # the whole minutes inside the range: [lo, hi)
    if filters.ts_from is not None:
        lo = minute_of(filters.ts_from)
        if minute_start(lo) != filters.ts_from:
            lo += 1
    if filters.ts_to is not None:
        hi = minute_of(filters.ts_to)
    if lo is not None and (lo > LAST_MINUTE or (hi is not None and lo >= hi)):
        parts.append(_events(dialect, groups, keys, filters))  # no whole minute inside
    else:
        for width, start, end in _spans(lo, hi, hours="minute" not in groups):
            parts.append(_rollup(dialect, groups, keys, filters, width, start, end))
        if lo is not None and minute_start(lo) != filters.ts_from:
            parts.append(_events(dialect, groups, keys, replace(filters, ts_to=minute_start(lo))))
        if hi is not None and minute_start(hi) != filters.ts_to:
            parts.append(_events(dialect, groups, keys, replace(filters, ts_from=minute_start(hi))))
    united = union_all(*parts).subquery("parts") if len(parts) > 1 else parts[0].subquery("parts")
    columns = [united.c[key].label(name) for key, name in zip(keys, names, strict=True)]
    query = select(
        *columns,
        *(func.sum(united.c[m], type_=BigInteger).label(m) for m in MEASURES),
    ).group_by(*(united.c[key] for key in keys))
    if order:
        query = query.order_by(*(united.c[key] for key in keys))
    return query


def _spans(lo: int | None, hi: int | None, *, hours: bool) -> list[tuple[int, int | None, int | None]]:
    """``(width, from minute, to minute)`` rollup reads covering the whole minutes ``[lo, hi)``: hour
    rows for the whole hours inside, minute rows around them (or minute rows only)."""
    if not hours:
        return [(1, lo, hi)]
    first = None if lo is None else -(-lo // 60) * 60  # the first whole hour
    last = None if hi is None else hi - hi % 60  # the end of the last whole hour
    if first is not None and last is not None and first >= last:
        return [(1, lo, hi)]
    out: list[tuple[int, int | None, int | None]] = [(60, first, last)]
    if lo is not None and lo != first:
        out.append((1, lo, first))
    if hi is not None and hi != last:
        out.append((1, last, hi))
    return out


def _events(
    dialect: str, groups: Sequence[str], keys: Sequence[str], filters: store.EventFilter
) -> Select[Any]:
    columns = [store.group_column(dialect, g) for g in groups]
    return (
        select(
            *(c.label(k) for c, k in zip(columns, keys, strict=True)),
            func.count().label("requests"),
            func.sum(case((store.is_error(), 1), else_=0)).label("errors"),
            func.sum(case((store.is_cancelled(), 1), else_=0)).label("cancelled"),
            func.sum(_E.c.input_tokens).label("input_tokens"),
            func.sum(_E.c.output_tokens).label("output_tokens"),
            func.sum(_E.c.cached_input_tokens).label("cached_input_tokens"),
            func.sum(_E.c.cost_nanos, type_=BigInteger).label("cost_nanos"),
        )
        .where(*filters.conditions())
        .group_by(*columns)
    )


def _rollup(
    dialect: str,
    groups: Sequence[str],
    keys: Sequence[str],
    filters: store.EventFilter,
    width: int,
    lo: int | None,
    hi: int | None,
) -> Select[Any]:
    """The rows of one width in ``[lo, hi)``, summed per group on integer buckets first, then
    labelled (few rows by then)."""
    columns = [_bucket(SPANS[g]) if g in SPANS else R.c[store.GROUPS[g]] for g in groups]
    where = [R.c.width == width, *_conditions(filters)]
    if lo is not None:
        where.append(R.c.minute >= lo)
    if hi is not None:
        where.append(R.c.minute < hi)
    summed = (
        select(
            *(c.label(k) for c, k in zip(columns, keys, strict=True)),
            func.sum(R.c.requests).label("requests"),
            func.sum(case((R.c.outcome == ERROR, R.c.requests), else_=0)).label("errors"),
            func.sum(case((R.c.outcome == CANCELLED, R.c.requests), else_=0)).label("cancelled"),
            func.sum(R.c.input_tokens).label("input_tokens"),
            func.sum(R.c.output_tokens).label("output_tokens"),
            func.sum(R.c.cached_input_tokens).label("cached_input_tokens"),
            case((func.sum(R.c.priced) > 0, func.sum(R.c.cost_nanos)), else_=None).label("cost_nanos"),
        )
        .where(*where)
        .group_by(*columns)
        .subquery("rolled")
    )
    labelled = [
        _label(dialect, g, summed.c[k]).label(k) if g in SPANS else summed.c[k]
        for g, k in zip(groups, keys, strict=True)
    ]
    return select(*labelled, *(summed.c[m] for m in MEASURES))


def _bucket(span: int) -> ColumnElement[Any]:
    """The minute floored to ``span`` minutes (SQL's integer division truncates toward zero)."""
    if span == 1:
        return R.c.minute
    return literal_column(
        f"CASE WHEN usage_rollup.minute >= 0 THEN usage_rollup.minute / {span}"
        f" ELSE (usage_rollup.minute - {span - 1}) / {span} END",
        BigInteger,
    )


def _label(dialect: str, group_by: str, bucket: ColumnElement[Any]) -> ColumnElement[Any]:
    """The text ``relay.store.usage.group_column`` gives the bucket's events."""
    pg_pattern, sqlite_pattern = store.BUCKETS[group_by]
    seconds = bucket * literal_column(str(SPANS[group_by] * 60), BigInteger)
    if dialect == "postgresql":
        utc = func.timezone(literal_column("'UTC'"), func.to_timestamp(seconds))
        return func.to_char(utc, literal_column(f"'{pg_pattern}'"))
    return func.strftime(literal_column(f"'{sqlite_pattern}'"), seconds, literal_column("'unixepoch'"))


def _conditions(filters: store.EventFilter) -> list[ColumnElement[bool]]:
    """``EventFilter.conditions`` on the rollup's columns, without the time range (the caller's)."""
    out: list[ColumnElement[bool]] = []
    for column in (
        "source",
        "project_id",
        "team_id",
        "policy_id",
        "model",
        "host",
        "principal_id",
        "credential_id",
    ):
        value = getattr(filters, column)
        if value is not None:
            out.append(R.c[column] == value)
    if filters.status_class is not None:
        low = int(filters.status_class[0]) * 100
        out.append(and_(R.c.status >= low, R.c.status < low + 100))
    if filters.status is not None:
        out.append(R.c.status == filters.status)
    if filters.error is not None:
        out.append(R.c.outcome == ERROR if filters.error else R.c.outcome != ERROR)
    return out
