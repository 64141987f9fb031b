"""Does a claim cost the same with a million items waiting? (SPEC §17 "Scale", the claim of §10.6.)

On a fresh Postgres database (created through ``--postgres``, an admin URL, dropped at the end),
migrated to head, for each ``--sizes`` N (default 10 000, 100 000, 1 000 000): empty the queue's
tables, submit one batch of N items (the batch row through ``BatchStore.insert_batch``, its items with
one ``INSERT … SELECT generate_series``), the first ``--done`` share of them (0.5) already completed as
in a batch half way through, and ``--others`` small batches (5 items each) spread over
``--projects`` projects, so the claim's pick walks many open batches; ``ANALYZE`` (what autovacuum does
soon after a big insert; ``--no-analyze`` measures before it). Then:

- **claim**: ``--claims`` claims of ``--limit`` items through ``BatchStore.claim`` (the real statements,
  on one held connection, as the worker pool's dispatcher runs them): median and p95 latency;
- **pick plan**: ``EXPLAIN (ANALYZE)`` of the claim's batch pick (in a transaction rolled back), its
  execution time and whether any node scans ``batch_items`` sequentially;
- **EXISTS pick** (for reference): the same for the pick as it was before fair share, with its "has an
  unreserved item" test written as an ``EXISTS``, which Postgres may flatten into a semi-join over
  every waiting item.

The baseline is the first size (10 000): the table shows each figure's ratio to it. A benchmark, not a
test: it prints figures and exits 0. About 1 minute with the defaults (the 1 000 000-item insert takes
most of it).

    .venv/bin/python bench/claim_at_scale.py [--postgres postgresql://postgres@127.0.0.1:5432/test]
        [--sizes 10000,100000,1000000] [--done 0.5] [--claims 50] [--limit 16] [--others 200]
        [--projects 20] [--no-analyze]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import exists, literal_column, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from common import machine_line, markdown_table
from relay.store.batch_queue import BatchStore
from relay.store.batch_queue._claims import _PG_PICK
from relay.store.batch_queue._rows import B, I
from relay.store.engine import create_engine
from relay.store.migrate import upgrade_to_head

QUEUE_TABLES = ("usage_events", "batch_items", "batches", "batch_workers", "batch_project_turns")
BIG_PROJECT = "prj_big"


def batch_row(batch_id: str, project_id: str) -> dict[str, Any]:
    owner = "ab" * 32
    return {
        "id": batch_id,
        "created_at": datetime.now(UTC),
        "owner": owner,
        "key_hash": owner,
        "token_claims": None,
        "policy_id": "pol_bench",
        "policy_name": "bench",
        "project_id": project_id,
        "team_id": "tm_bench",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_bench",
        "credential_kind": "key",
        "credential_id": "rk_bench",
        "inbound_shape": "openai",
    }


async def fill(
    engine: AsyncEngine, store: BatchStore, size: int, done: float, others: int, projects: int
) -> None:
    async with engine.begin() as conn:
        for table in QUEUE_TABLES:
            await conn.execute(text(f"DELETE FROM {table}"))
    big = f"b_big_{uuid.uuid4().hex[:8]}"
    await store.insert_batch(batch_row(big, BIG_PROJECT), 1)  # the row and item 0, as a submit writes
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO batch_items (batch_id, idx, state, finished_at, status)"
                " SELECT :b, g, CASE WHEN g < :done THEN 'completed' ELSE 'available' END,"
                " CASE WHEN g < :done THEN now() END, CASE WHEN g < :done THEN 200 END"
                " FROM generate_series(1, :last) AS g"
            ),
            {"b": big, "last": size - 1, "done": int(size * done)},
        )
        await conn.execute(text("UPDATE batches SET total_items = :n WHERE id = :b"), {"n": size, "b": big})
        if done > 0:  # item 0 too, which the submit wrote
            await conn.execute(
                text(
                    "UPDATE batch_items SET state = 'completed', finished_at = now(), status = 200"
                    " WHERE batch_id = :b AND idx = 0"
                ),
                {"b": big},
            )
    for n in range(others):
        await store.insert_batch(batch_row(f"b_small_{n}_{uuid.uuid4().hex[:6]}", f"prj_{n % projects}"), 5)


def exists_pick() -> Any:
    """The claim's pick as it was: the unreserved-item test as an EXISTS (which Postgres flattens)."""
    unreserved = exists().where(
        I.c.batch_id == B.c.id, I.c.state == literal_column("'available'"), I.c.claimed_by.is_(None)
    )
    return (
        select(B)
        .where(B.c.completed_at.is_(None), B.c.status == literal_column("'queued'"), unreserved)
        .order_by(B.c.last_claimed_at.asc().nulls_first(), B.c.created_at, B.c.id)
        .limit(1)
        .with_for_update(skip_locked=True, key_share=True)
    )


def scans_items(plan: list[str]) -> bool:
    return any("Seq Scan on batch_items" in line for line in plan)


def literal_sql(statement: Any) -> str:
    compiled = statement.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
    return str(compiled)


async def explain(conn: AsyncConnection, sql: str) -> tuple[float, list[str]]:
    """Execution time (ms) and plan lines of ``sql``, run and rolled back."""
    trans = await conn.begin()
    try:
        rows = (await conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")).scalars().all()
    finally:
        await trans.rollback()
    lines = [str(row) for row in rows]
    executed = next(
        float(m.group(1)) for line in lines if (m := re.search(r"Execution Time: ([\d.]+)", line))
    )
    return executed, lines


async def measure(url: str, args: argparse.Namespace) -> None:
    engine = create_engine(url)
    store = BatchStore(engine)
    new_pick = _PG_PICK.replace("$1::varchar[]", "ARRAY[]::varchar[]")  # what the claim runs, no skips
    old_pick = literal_sql(exists_pick())
    rows: list[dict[str, Any]] = []
    plans: dict[int, list[str]] = {}
    exists_plans: dict[int, list[str]] = {}
    try:
        await upgrade_to_head(engine)
        for size in args.sizes:
            started = time.perf_counter()
            await fill(engine, store, size, args.done, args.others, args.projects)
            if args.analyze:
                async with engine.begin() as conn:
                    await conn.exec_driver_sql("ANALYZE batches, batch_items")
            filled_s = time.perf_counter() - started
            async with engine.connect() as conn:
                pick_ms, plan = await explain(conn, new_pick)
                exists_ms, exists_plan = await explain(conn, old_pick)
            plans[size] = plan
            exists_plans[size] = exists_plan
            held = store.held()
            latencies = []
            try:
                for _ in range(args.claims):
                    started = time.perf_counter()
                    async with held.use() as db:
                        claimed = await store.claim("bench", args.limit, db=db)
                    if not claimed:  # everything reserved: fewer claims at this size
                        break
                    latencies.append((time.perf_counter() - started) * 1000)
            finally:
                await held.close()
            latencies.sort()
            rows.append(
                {
                    "size": size,
                    "claims": len(latencies),
                    "fill_s": filled_s,
                    "claim_p50": statistics.median(latencies),
                    "claim_p95": latencies[max(0, round(0.95 * len(latencies)) - 1)],
                    "pick_ms": pick_ms,
                    "seq_items": scans_items(plan),
                    "exists_ms": exists_ms,
                    "exists_seq_items": scans_items(exists_plan),
                }
            )
            print(f"{size:>9} items: filled in {filled_s:.1f} s, measured", file=sys.stderr)
    finally:
        await engine.dispose()
    base = rows[0]
    table = [
        [
            f"{r['size']:,} ({r['claims']} claims)",
            f"{r['claim_p50']:.2f} ({r['claim_p50'] / base['claim_p50']:.1f}×)",
            f"{r['claim_p95']:.2f}",
            f"{r['pick_ms']:.2f} ({r['pick_ms'] / base['pick_ms']:.1f}×)",
            "yes" if r["seq_items"] else "no",
            f"{r['exists_ms']:.2f} ({r['exists_ms'] / base['exists_ms']:.1f}×)",
            "yes" if r["exists_seq_items"] else "no",
        ]
        for r in rows
    ]
    print(machine_line())
    print(
        f"one batch of N items ({args.done:.0%} of them completed) + {args.others} batches of 5 items "
        f"over {args.projects} projects; "
        f"{args.claims} claims of {args.limit}; ANALYZE {'on' if args.analyze else 'off'}; "
        f"baseline = {base['size']:,} items"
    )
    print()
    headers = [
        "items waiting",
        "claim p50 ms (× baseline)",
        "claim p95 ms",
        "pick ms, EXPLAIN ANALYZE (×)",
        "pick: seq scan on items",
        "EXISTS pick ms (×)",
        "EXISTS: seq scan on items",
    ]
    print(markdown_table(headers, table, right=[True] * len(headers)))
    largest = max(plans)
    print(f"\nThe pick's plan at {largest:,} items:\n")
    print("\n".join(f"    {line}" for line in plans[largest]))
    print(f"\nThe EXISTS pick's plan at {largest:,} items:\n")
    print("\n".join(f"    {line}" for line in exists_plans[largest]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test", help="admin URL")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--claims", type=int, default=50)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--done", type=float, default=0.5, help="share of the big batch already completed")
    parser.add_argument("--others", type=int, default=200)
    parser.add_argument("--projects", type=int, default=20)
    parser.add_argument("--no-analyze", dest="analyze", action="store_false")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",")]
    name = f"relay_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(args.postgres)

    async def admin_sql(statement: str) -> None:  # CREATE/DROP DATABASE: outside a transaction
        async with admin.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            await conn.exec_driver_sql(statement)

    async def run() -> None:
        await admin_sql(f'CREATE DATABASE "{name}"')
        try:
            await measure(
                make_url(args.postgres).set(database=name).render_as_string(hide_password=False), args
            )
        finally:
            await admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.dispose()

    asyncio.run(run())


if __name__ == "__main__":
    main()
