"""The dashboard overview's queries at scale (SPEC §16 "every figure computed on the server from the
whole data"): the time the overview's usage summaries take on a table of ``--events`` usage events
(10 million by default), read from the per-minute rollup (``usage_rollup``) and, as the baseline in
the same run, from the events themselves as the overview read them before the rollup.

On a fresh database (Postgres through ``--postgres``, an admin URL, dropped at the end; or ``--sqlite``),
migrated to head, filled in the database itself (``generate_series`` / a recursive CTE) with events
spread over the last 14 days, a hundredth of them in the last hour (about ``events / 6 000`` a minute:
1 667 a minute at 10 M), 6 models and 50 projects (150 combinations, each active in every minute: a
rollup-unfriendly spread). The rollup is then rebuilt from the events (``usage_rollup.rebuild``, the
same ``INSERT … SELECT`` migration 0023 runs: its time is what that migration costs at this size).
Then, each ``--samples`` times, interleaved:

- **rollup**: through ``UsageQueries`` exactly as the overview calls it: the summary by ``minute``
  over the last hour and the ``day``/``model``/``project`` breakdown of the last 14 days, without
  percentiles (whole hours from the rollup's hour rows, whole minutes from its minute rows, the
  partial edge minutes from the events);
- **events** (the baseline): the same two queries read from the events only (``rollup=False``);
- **old** (only with ``--only old``): the overview before the one-scan breakdown: the newest 1 000
  events of the last hour, and the all-time summaries by ``day``, ``model``, ``project`` with p50/p95.

It prints the median of each and the machine's load. A benchmark, not a test: it exits 0 once it has
measured.

    .venv/bin/python bench/overview_at_scale.py [--events 10000000] [--samples 3]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres | --sqlite] [--only rollup|events|old]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import Databases
from common import machine_line, markdown_table
from relay.control.services.usage import UsageQueries
from relay.store import usage_rollup, usage_summaries
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.store.usage import EventFilter

CHUNK = 1_000_000
DAY_S = 86_400
HOUR_EVERY = 100  # one event in a hundred falls in the last hour

# Column list and per-row expressions (``g`` is the row number); the ts expression is per dialect.
COLUMNS = (
    "id, ts, request_id, source, status, error_kind, model, upstream_model, host, adapter, inbound_shape,"
    " attempts, streamed, input_tokens, output_tokens, cached_input_tokens, cost_nanos, latency_ms,"
    " policy_id, project_id, team_id, principal_kind, principal_id, credential_kind, credential_id"
)


def values(g: str, ts: str) -> str:
    """The SELECT list of one generated event (``||`` concatenates on both dialects)."""
    return (
        f"'ue_' || {g}, {ts}, 'req_' || {g}, 'live',"
        f" CASE WHEN {g} % 50 = 0 THEN 500 ELSE 200 END,"
        f" CASE WHEN {g} % 50 = 0 THEN 'upstream_status' END,"
        f" 'model-' || ({g} % 6), 'up', 'openai', 'openai', 'openai', 1, false,"
        f" {g} % 900 + 100, {g} % 300 + 20, 0, ({g} % 1000) * 1000, {g} % 2000 + 5,"
        f" 'pol_a', 'prj_' || ({g} % 50), 'tm_a', 'serviceaccount', 'sa_a', 'key', 'key_a'"
    )


async def fill(url: str, events: int, now: datetime) -> float:
    engine = create_engine(url, pool_size=1)
    started = time.perf_counter()
    postgres = url.startswith("postgres")
    try:
        for start in range(0, events, CHUNK):
            stop = min(start + CHUNK, events)
            # Seconds before now: every HOUR_EVERY-th event within the last hour, the rest over 14 days.
            back = f"(CASE WHEN g % {HOUR_EVERY} = 0 THEN g % 3600 ELSE g % ({14 * DAY_S}) END)"
            if postgres:
                ts = f"(TIMESTAMPTZ '{now.isoformat()}' - make_interval(secs => {back}))"
                sql = (
                    f"INSERT INTO usage_events ({COLUMNS}) SELECT {values('g', ts)}"
                    f" FROM generate_series({start + 1}, {stop}) AS g"
                )
            else:
                base = now.strftime("%Y-%m-%d %H:%M:%S")
                ts = f"(strftime('%Y-%m-%d %H:%M:%S', '{base}', '-' || {back} || ' seconds') || '.000000')"
                sql = (
                    f"WITH RECURSIVE s(g) AS (SELECT {start + 1}"
                    f" UNION ALL SELECT g + 1 FROM s WHERE g < {stop})"
                    f" INSERT INTO usage_events ({COLUMNS}) SELECT {values('g', ts)} FROM s"
                )
            async with engine.begin() as conn:
                await conn.exec_driver_sql(sql)
            print(f"  {stop:,} events", file=sys.stderr)
        async with engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE" if not postgres else "ANALYZE usage_events")
            await conn.commit()
    finally:
        await engine.dispose()
    return time.perf_counter() - started


async def measure(url: str, samples: int, now: datetime, only: str | None = None) -> dict[str, list[float]]:
    engine = create_engine(url)
    usage = UsageQueries(engine)
    since = (now - timedelta(minutes=59)).replace(second=0, microsecond=0).isoformat()
    first_day = (now - timedelta(days=13)).replace(hour=0, minute=0, second=0, microsecond=0).isoformat()

    async def rollup() -> None:
        await usage.summary({"group_by": "minute", "from": since}, latency=False)
        await usage.breakdown({"from": first_day})  # day, model and project in one query

    async def events() -> None:
        async with engine.connect() as conn:
            hour = EventFilter(ts_from=datetime.fromisoformat(since))
            await usage_summaries.summary(conn, "minute", hour, latency=False, rollup=False)
            days = EventFilter(ts_from=datetime.fromisoformat(first_day))
            await usage_summaries.by_day_model_project(conn, days, rollup=False)

    async def old() -> None:
        await usage.events({"from": since, "limit": "1000"})
        for group in ("day", "model", "project"):
            await usage.summary({"group_by": group})

    runs: dict[str, Callable[[], Awaitable[None]]] = {"rollup": rollup, "events": events}
    if only is not None:
        runs = {only: {**runs, "old": old}[only]}
    found: dict[str, list[float]] = {name: [] for name in runs}
    try:
        for _ in range(samples):
            for name, run in runs.items():  # interleaved: the machine's load hits both alike
                started = time.perf_counter()
                await run()
                found[name].append(time.perf_counter() - started)
    finally:
        await engine.dispose()
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--only", choices=("rollup", "events", "old"), help="measure one only (old: slow)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    where.add_argument("--sqlite", action="store_true")
    where.add_argument(
        "--database", help="measure an already filled database (kept); 'now' is its newest event"
    )
    args = parser.parse_args()
    if args.database:
        return measure_only(args.database, args.samples, args.only)
    with tempfile.TemporaryDirectory(prefix="relay-overview-") as tmp:
        databases = Databases(None if args.sqlite else args.postgres, Path(tmp))
        try:
            url = databases.fresh(Path(tmp))
            engine = create_engine(url)
            asyncio.run(_migrate(engine))
            now = datetime.now(UTC)
            fill_s = asyncio.run(fill(url, args.events, now))
            rebuild_s, rollup_rows = asyncio.run(rebuild(url))
            found = asyncio.run(measure(url, args.samples, now, args.only))
        finally:
            if not args.sqlite:
                databases.drop_all()
    rows: list[list[Any]] = [
        [name, f"{statistics.median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}"]
        for name, times in found.items()
    ]
    print(f"Overview queries on {databases.kind}, {args.events:,} usage events (filled in {fill_s:.0f} s)")
    print(f"rollup rebuilt (migration 0023's backfill) in {rebuild_s:.1f} s: {rollup_rows:,} rows")
    print(machine_line())
    print(markdown_table(["queries", "median s", "min s", "max s"], rows, [False, True, True, True]))
    return 0


def measure_only(url: str, samples: int, only: str | None) -> int:
    async def newest() -> tuple[datetime, int]:
        engine = create_engine(url, pool_size=1)
        try:
            async with engine.connect() as conn:
                found = (await conn.exec_driver_sql("SELECT max(ts), count(*) FROM usage_events")).one()
        finally:
            await engine.dispose()
        latest = found[0] if isinstance(found[0], datetime) else datetime.fromisoformat(str(found[0]))
        return latest.replace(tzinfo=latest.tzinfo or UTC), int(found[1])

    now, events = asyncio.run(newest())
    found = asyncio.run(measure(url, samples, now + timedelta(seconds=1), only))
    rows = [
        [name, f"{statistics.median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}"]
        for name, times in found.items()
    ]
    print(f"Overview queries on {url.split('/')[-1]}, {events:,} usage events")
    print(machine_line())
    print(markdown_table(["queries", "median s", "min s", "max s"], rows, [False, True, True, True]))
    return 0


async def rebuild(url: str) -> tuple[float, int]:
    """``usage_rollup`` from the generated events (the fill bypasses the writer), timed."""
    engine = create_engine(url, pool_size=1)
    try:
        started = time.perf_counter()
        async with engine.begin() as conn:
            await usage_rollup.rebuild(conn)
        took = time.perf_counter() - started
        async with engine.connect() as conn:
            await conn.exec_driver_sql("ANALYZE usage_rollup")
            await conn.commit()
            rows = (await conn.exec_driver_sql("SELECT count(*) FROM usage_rollup")).scalar_one()
    finally:
        await engine.dispose()
    return took, int(rows)


async def _migrate(engine: Any) -> None:
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()


if __name__ == "__main__":
    raise SystemExit(main())
