"""What does settling a batch item cost the process, on SQLite or Postgres? (SPEC §13's W/L target.)

On SQLite the batch engine's finalizer settles every finished item in the process: its statements run
in aiosqlite's thread, which shares the GIL with the event loop, so each hop to that thread and each
statement SQLAlchemy compiles is CPU the workers' loop does not get. This measures it directly, without
the noise of an upstream and a load generator: a fresh SQLite file (temporary directory) migrated to
head, one batch of ``--items`` items claimed and started through ``BatchStore``, then settled in groups
of ``--group`` items through ``BatchStore.finalize_many``, each in a turn of the store's write group (as
the worker pool runs it), with its usage event. Reported: CPU time of the process (``process_time``:
the loop's thread and aiosqlite's together) per item settled, and the wall time per group.

``--postgres ADMIN_URL`` measures on Postgres instead: a fresh database per run (created through
``ADMIN_URL``, dropped after), the items claimed and started as above, then settled in groups through
``finalize_many`` on one connection the task holds (as the finalizer holds its own). The CPU is Relay's
(this process's), not the database server's. It also reports the claims' CPU per item claimed (claim
and start, groups of ``--group``): the other statements of a batch item's hot loop.

``--compare-src DIR`` (another checkout's ``src/``, e.g. a worktree of the base commit) runs the same
measurement on that code too, in a fresh process per run, interleaved run by run (this checkout, then
that one), so a change is judged against a baseline measured in the same run. The table shows medians
(min–max) over ``--rounds``. A benchmark, not a test: it prints, and exits 0 once it measured.

    .venv/bin/python bench/finalize_cost.py [--items 4000] [--group 64] [--rounds 5]
                                            [--compare-src ../base/src]
                                            [--postgres postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OWN_SRC = HERE.parent / "src"


def batch_row(batch_id: str) -> dict[str, Any]:
    owner = "ab" * 32
    return {
        "id": batch_id,
        "created_at": datetime.now(UTC),
        "owner": owner,
        "key_hash": owner,
        "token_claims": None,
        "policy_id": "pol_bench",
        "policy_name": "default",
        "project_id": "prj_bench",
        "team_id": "tm_bench",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_bench",
        "credential_kind": "key",
        "credential_id": "rk_bench",
        "inbound_shape": "openai",
    }


async def measure(items: int, group: int) -> dict[str, float]:
    """One run in this process, on whichever ``relay`` PYTHONPATH gives it."""
    from relay.store.batch_queue import BatchStore
    from relay.store.engine import create_engine
    from relay.store.migrate import upgrade_to_head

    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite+aiosqlite:///{tmp}/relay.db")
        try:
            await upgrade_to_head(engine)
            store = BatchStore(engine)
            batch_id, running, _ = await submitted_and_started(store, items, 500)
            write_group = store.write_group()
            assert write_group is not None
            write_group.open()
            try:
                cpu0, wall0, groups = time.process_time(), time.perf_counter(), 0
                for start in range(0, len(running), group):
                    finals = completed(batch_id, running[start : start + group])
                    async with write_group.use() as conn:
                        done = await store.finalize_many("bench", finals, db=conn)
                    assert len(done) == len(finals)
                    groups += 1
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            finally:
                await write_group.close()
        finally:
            await engine.dispose()
    return {"cpu_us_per_item": cpu / len(running) * 1e6, "wall_ms_per_group": wall / groups * 1000}


async def submitted_and_started(
    store: Any, items: int, group: int, db: Any = None
) -> tuple[str, list[int], float]:
    """A new batch of ``items`` items, all claimed and started in groups of ``group`` (on ``db``, a
    held connection, when given): its id, its running idxs and the CPU seconds the claims and starts
    took."""
    from relay.domain.ids import mint_id

    batch_id = mint_id("b")
    await store.insert_batch(batch_row(batch_id), items)
    running: list[int] = []
    held = {} if db is None else {"db": db}
    cpu0 = time.process_time()
    while claimed := await store.claim("bench", group, **held):
        started = await store.start("bench", [(c.batch_id, c.idx) for c in claimed], **held)
        running += sorted(idx for _, idx in started)
    return batch_id, running, time.process_time() - cpu0


def completed(batch_id: str, idxs: list[int]) -> list[Any]:
    """These items' final states: completed, each with its usage event (what a 200 answer settles)."""
    from relay.domain.ids import mint_id
    from relay.store.batch_queue import FinalItem
    from relay.usage.event import UsageEvent

    return [
        FinalItem(batch_id, idx, "completed", 200, None, event(UsageEvent, mint_id, batch_id, idx))
        for idx in idxs
    ]


def measure_postgres(admin_url: str, items: int, group: int) -> dict[str, float]:
    """One run on a fresh Postgres database (dropped after)."""
    from batch_throughput import _pg_admin, _with_database

    name = f"relay_bench_{uuid.uuid4().hex[:12]}"
    _pg_admin(admin_url, f'CREATE DATABASE "{name}"')
    try:
        return asyncio.run(measure_on_postgres(_with_database(admin_url, name), items, group))
    finally:
        _pg_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def measure_on_postgres(url: str, items: int, group: int) -> dict[str, float]:
    """Claims (and starts) in groups of ``group`` on one held connection, then settles."""
    from relay.store.batch_queue import BatchStore
    from relay.store.engine import create_engine
    from relay.store.migrate import upgrade_to_head

    engine = create_engine(url)
    try:
        await upgrade_to_head(engine)
        store = BatchStore(engine)
        async with engine.connect() as held:  # one connection the task keeps, as the batch loops do
            batch_id, running, claim_cpu = await submitted_and_started(store, items, group, held)
            cpu0, wall0, groups = time.process_time(), time.perf_counter(), 0
            for start in range(0, len(running), group):
                finals = completed(batch_id, running[start : start + group])
                done = await store.finalize_many("bench", finals, db=held)
                assert len(done) == len(finals)
                groups += 1
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        await engine.dispose()
    return {
        "cpu_us_per_item": cpu / len(running) * 1e6,
        "wall_ms_per_group": wall / groups * 1000,
        "claim_cpu_us_per_item": claim_cpu / len(running) * 1e6,
    }


def event(cls: Any, mint_id: Any, batch_id: str, idx: int) -> Any:
    return cls(
        id=mint_id("ue"),
        ts=datetime.now(UTC),
        request_id=f"req_{batch_id}_{idx}",
        source="batch",
        status=200,
        inbound_shape="openai",
        latency_ms=1,
        policy_id="pol_bench",
        project_id="prj_bench",
        team_id="tm_bench",
        principal_kind="serviceaccount",
        principal_id="sa_bench",
        credential_kind="key",
        credential_id="rk_bench",
        batch_id=batch_id,
        batch_idx=idx,
    )


def run_child(src: Path, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{HERE}"}
    out = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--items",
            str(args.items),
            "--group",
            str(args.group),
            *(["--postgres", args.postgres] if args.postgres else []),
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=4000, help="items settled per run")
    parser.add_argument("--group", type=int, default=64, help="items per finalize_many")
    parser.add_argument("--rounds", type=int, default=5, help="runs per code under test")
    parser.add_argument("--compare-src", type=Path, help="another checkout's src/ to interleave with")
    parser.add_argument(
        "--postgres", metavar="ADMIN_URL", help="measure on a fresh Postgres database per run"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if args.postgres:
            result = measure_postgres(args.postgres, args.items, args.group)
        else:
            result = asyncio.run(measure(args.items, args.group))
        print(json.dumps(result))
        return
    from common import machine_line, markdown_table

    trees = {"this checkout": OWN_SRC}
    if args.compare_src is not None:
        trees["compare"] = args.compare_src.resolve()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for round_no in range(args.rounds):
        for name, src in trees.items():
            result = run_child(src, args)
            results[name].append(result)
            print(
                f"round {round_no + 1} · {name}: {result['cpu_us_per_item']:.1f} µs CPU per item, "
                f"{result['wall_ms_per_group']:.2f} ms per group"
                + (
                    f", claims {result['claim_cpu_us_per_item']:.1f} µs CPU per item" if args.postgres else ""
                ),
                flush=True,
            )
    print()
    print(machine_line())
    where = "Postgres, one held connection" if args.postgres else "SQLite, one write group"
    print(
        f"{args.items} items settled in groups of {args.group}, {where};"
        f" median (min–max) of {args.rounds} runs"
    )
    headers = ["code", "CPU µs per item settled", "wall ms per group"]
    keys = ["cpu_us_per_item", "wall_ms_per_group"]
    if args.postgres:
        headers.append("CPU µs per item claimed (claim + start)")
        keys.append("claim_cpu_us_per_item")
    rows = [
        [f"{name} ({src})", *(summary([r[key] for r in results[name]]) for key in keys)]
        for name, src in trees.items()
    ]
    print(markdown_table(headers, rows, [False, *(True for _ in keys)]))


if __name__ == "__main__":
    main()
