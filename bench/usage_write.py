"""The usage writer's cost per event with the per-minute rollup (SPEC §8, §13): what adding each flush
to ``usage_rollup`` (one aggregated ``INSERT … ON CONFLICT DO UPDATE`` in the flush's transaction)
costs next to the events' bulk insert alone (the write before the rollup), measured in the same run.

On a fresh database per backend (embedded SQLite in a temporary directory; Postgres through
``--postgres``, an admin URL, dropped at the end), migrated to head, ``--flushes`` transactions of
``--batch`` events each (55: what the live writer flushes every 50 ms at 1 100 req/s), alternating
**events** (the events' bulk insert only, ``usage.bulk_insert`` as before) and **events + rollup**
(``usage.insert_events``, what every writer calls now). Events are stamped now, spread over 10
projects × 3 models × 2 outcomes (up to 60 rollup rows a flush, most already there: updates). Prints
the median and p90 wall time per flush and per event, and the CPU the rollup's aggregation takes on
the event loop per event (``usage_rollup.aggregate``, pure Python). A benchmark, not a test.

    .venv/bin/python bench/usage_write.py [--flushes 400] [--batch 55]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import Databases
from common import machine_line, markdown_table
from relay.domain.ids import mint_id
from relay.store import usage as store
from relay.store import usage_rollup
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.usage.event import UsageEvent

_n = itertools.count()


def rows(batch: int) -> list[UsageEvent]:
    out = []
    for _ in range(batch):
        n = next(_n)
        failed = n % 7 == 0
        out.append(
            UsageEvent(
                id=mint_id("ue"),
                ts=datetime.now(UTC),
                request_id=f"req_{n}",
                source="live",
                status=500 if failed else 200,
                error_kind="upstream_status" if failed else None,
                inbound_shape="openai",
                latency_ms=100,
                policy_id="pol_a",
                project_id=f"prj_{n % 10}",
                team_id="tm_a",
                principal_kind="serviceaccount",
                principal_id=f"sa_{n % 10}",
                credential_kind="key",
                credential_id=f"key_{n % 10}",
                model=f"model-{n % 3}",
                requested_model=f"model-{n % 3}",
                upstream_model="up",
                host="openai",
                adapter="openai",
                host_key_id="hk_a",
                attempts=1,
                input_tokens=100,
                output_tokens=20,
                cost_nanos=1000,
                relay_key_hash="ab" * 32,
            )
        )
    return out


async def events_only(conn: Any, batch: list[dict[str, Any]]) -> None:
    """The write before the rollup: the events' bulk insert alone."""
    bulk = store.bulk_insert(conn.dialect)
    await conn.exec_driver_sql(bulk.sql, [bulk.params(row) for row in batch])


async def measure(url: str, flushes: int, batch: int) -> dict[str, list[float]]:
    engine = create_engine(url)
    try:
        await upgrade_to_head(engine)
        found: dict[str, list[float]] = {"events": [], "events + rollup": []}
        writes = {"events": events_only, "events + rollup": store.insert_events}
        for _ in range(flushes):
            for name, write in writes.items():  # interleaved: the machine's load hits both alike
                flush = rows(batch)
                started = time.perf_counter()
                async with engine.begin() as conn:
                    await write(conn, flush)
                found[name].append(time.perf_counter() - started)
        return found
    finally:
        await engine.dispose()


def aggregate_us(batch: int) -> float:
    flush = rows(batch)
    rounds = 200
    started = time.process_time()
    for _ in range(rounds):
        usage_rollup.aggregate(flush)
    return (time.process_time() - started) / rounds / batch * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flushes", type=int, default=400)
    parser.add_argument("--batch", type=int, default=55)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--backends", default="sqlite,postgres")
    args = parser.parse_args()
    table: list[list[str]] = []
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix="relay-usage-write-") as tmp:
            databases = Databases(args.postgres if backend == "postgres" else None, Path(tmp))
            try:
                found = asyncio.run(measure(databases.fresh(Path(tmp)), args.flushes, args.batch))
            finally:
                databases.drop_all()
        for name, times in found.items():
            times.sort()
            median = statistics.median(times)
            p90 = times[int(len(times) * 0.9)]
            per_event = f"{median / args.batch * 1e6:.1f}"
            table.append([databases.kind, name, f"{median * 1e3:.2f}", f"{p90 * 1e3:.2f}", per_event])
    print(f"Usage writes: {args.flushes} flushes of {args.batch} events per backend and kind, interleaved")
    print(f"rollup aggregation on the event loop: {aggregate_us(args.batch):.2f} µs CPU per event")
    print(machine_line())
    headers = ["database", "write", "median ms/flush", "p90 ms/flush", "median µs/event"]
    print(markdown_table(headers, table, [False, False, True, True, True]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
