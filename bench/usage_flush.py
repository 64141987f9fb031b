"""What one flush of the live usage writer costs in CPU, whatever its size (issue 33: the usage event's
share of a live request).

The writer flushes every 50 ms, so a flush's fixed cost is shared by the requests of those 50 ms: 25 at
500 req/s. This measures, in one process on a fresh database, the CPU (``time.process_time``: every
thread, aiosqlite's included) per flush of N events (``--sizes``), alternating:

- **kept connection** (what ``relay.usage.writer`` does): ``relay.store.usage_flush.write_flush`` on one
  connection kept between flushes — on SQLite the whole transaction in one call on aiosqlite's thread;
- **checkout per flush** (the writer before it): ``engine.begin()`` per flush, then
  ``usage.insert_events`` through SQLAlchemy (no payloads in either).

Prints ms per flush and µs per event, medians over ``--rounds``. A benchmark, not a test.

    .venv/bin/python bench/usage_flush.py [--sizes 1,25,100] [--flushes 200] [--rounds 3]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import Databases
from common import machine_line
from relay.store import usage
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head
from relay.store.usage_flush import write_flush
from usage_write import rows

Found = dict[tuple[str, int], list[float]]


async def measure(url: str, sizes: list[int], flushes: int, rounds: int) -> Found:
    engine = create_engine(url)
    found: Found = {}
    try:
        await upgrade_to_head(engine)
        kept = await engine.connect()

        async def kept_connection(events: list[Any]) -> None:
            await write_flush(kept, events, [])

        async def checkout_per_flush(events: list[Any]) -> None:
            async with engine.begin() as conn:
                await usage.insert_events(conn, events)

        ways = (("kept connection", kept_connection), ("checkout per flush", checkout_per_flush))
        for _ in range(rounds):
            for size in sizes:
                for name, flush in ways:  # interleaved: the machine's load hits both alike
                    batches = [rows(size) for _ in range(flushes)]
                    started = time.process_time()
                    for batch in batches:
                        await flush(batch)
                    found.setdefault((name, size), []).append((time.process_time() - started) / flushes)
        await kept.close()
        return found
    finally:
        await engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,25,100")
    parser.add_argument("--flushes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default=None, help="an admin URL: also a fresh Postgres database")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(machine_line())
    for postgres in [None] + ([args.postgres] if args.postgres else []):
        with tempfile.TemporaryDirectory(prefix="relay-usage-flush-") as tmp:
            databases = Databases(postgres, Path(tmp))
            try:
                found = asyncio.run(measure(databases.fresh(Path(tmp)), sizes, args.flushes, args.rounds))
            finally:
                databases.drop_all()
        print(f"\n{databases.kind}: CPU per flush, medians of {args.rounds} rounds of {args.flushes} flushes")
        print(f"  {'events':>6}  {'kept connection':>24}  {'checkout per flush':>24}")
        for size in sizes:
            cells = []
            for name in ("kept connection", "checkout per flush"):
                per_flush = statistics.median(found[(name, size)])
                cells.append(f"{per_flush * 1e3:6.3f} ms ({per_flush / size * 1e6:6.1f} µs/ev)")
            print(f"  {size:>6}  {cells[0]:>24}  {cells[1]:>24}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
