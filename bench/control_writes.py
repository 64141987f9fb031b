"""Control-plane write latency with and without the audit log (SPEC §21: one more insert in each
write's transaction, serialized on Postgres by the chain lock).

The audit log has no off switch, so "without" is Relay at the commit before the log (``--base-src``:
the ``src`` directory of a worktree of that commit), started by the same venv with
``PYTHONPATH=<base-src>``; "with" is this checkout. Both run side by side on fresh databases of the
same backend, and rounds alternate (base, after, base, after …) so the machine's noise falls on both.

Workload, per round and target:

- ``sequential``: one client PATCHes a policy (``payload_logging`` toggled) ``--writes`` times, one
  request at a time: each write's latency.
- ``concurrent``: ``--clients`` clients PATCH their own policies at once, ``--writes`` in all: the
  latency under contention (on Postgres the chain lock queues writers for the insert and commit).

Run (from the repository, with a base worktree)::

    git worktree add /tmp/relay-base <commit before the audit log>
    .venv/bin/python bench/control_writes.py --base-src /tmp/relay-base/src \\
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres] [--rounds 4] [--writes 300]

Prints p50/p99/mean per workload and target, and the difference. Nothing here asserts on numbers.

``--append-only`` isolates the log's own cost in process, without HTTP: on a migrated database of the
backend, alternating transactions that bump the catalog revision (what every write does) with and
without one audit entry appended (the chain lock, the head read, the insert), each timed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import Databases
from common import Processes, machine_line, markdown_table, percentile
from live_overhead import Relay, relay_admin, start_relay


@dataclass
class Samples:
    latencies_ms: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, workload: str, target: str, values: list[float]) -> None:
        self.latencies_ms.setdefault((workload, target), []).extend(values)


def prepare(relay: Relay, clients: int) -> list[str]:
    names = [f"bench-p{i}" for i in range(clients)]
    with httpx.Client(base_url=relay.control_url, headers=relay_admin(relay), timeout=30) as client:
        for name in names:
            response = client.post("/api/policies", json={"name": name, "models": []})
            response.raise_for_status()
    return names


async def patches(relay: Relay, names: list[str], writes: int) -> list[float]:
    """``writes`` PATCHes spread over one client per name, all at once; each one's latency in ms."""
    per_client = max(1, writes // len(names))
    out: list[float] = []

    async def client_loop(name: str, client: httpx.AsyncClient) -> None:
        for i in range(per_client):
            started = time.perf_counter()
            response = await client.patch(f"/api/policies/{name}", json={"payload_logging": i % 2 == 0})
            out.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()

    limits = httpx.Limits(max_connections=len(names))
    async with httpx.AsyncClient(
        base_url=relay.control_url, headers=relay_admin(relay), timeout=60, limits=limits
    ) as client:
        await asyncio.gather(*(client_loop(name, client) for name in names))
    return out


async def append_cost(url: str, iterations: int) -> Samples:
    """Transactions bumping the revision, alternately with and without one appended entry."""
    from relay.control.audit.log import AuditLog
    from relay.store import catalog as catalog_store
    from relay.store.engine import create_engine
    from relay.store.migrate import upgrade_to_head

    engine = create_engine(url)
    await upgrade_to_head(engine)
    writes = engine.execution_options(sqlite_begin="IMMEDIATE")
    audit = AuditLog(writes)
    samples = Samples()
    try:
        for i in range(iterations * 2):
            target = "after" if i % 2 else "base"
            started = time.perf_counter()
            async with writes.begin() as conn:
                await catalog_store.bump_revision(conn)
                if target == "after":
                    await audit.record(conn, "update", "Policy", "pol_bench", after={"payload_logging": True})
            samples.add("transaction", target, [(time.perf_counter() - started) * 1000])
    finally:
        await engine.dispose()
    return samples


def summary_rows(samples: Samples) -> list[list[str]]:
    rows = []
    for workload in ("sequential", "concurrent", "transaction"):
        stats = {}
        for target in ("base", "after"):
            values = sorted(samples.latencies_ms.get((workload, target), []))
            if values:
                stats[target] = (percentile(values, 50), percentile(values, 99), statistics.fmean(values))
        for target in ("base", "after"):
            if target in stats:
                p50, p99, mean = stats[target]
                rows.append(
                    [
                        workload,
                        target,
                        str(len(samples.latencies_ms[(workload, target)])),
                        f"{p50:.2f}",
                        f"{p99:.2f}",
                        f"{mean:.2f}",
                    ]
                )
        if len(stats) == 2:
            diff = [a - b for a, b in zip(stats["after"], stats["base"], strict=True)]
            rows.append([workload, "after − base", "", *(f"{d:+.2f}" for d in diff)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--base-src", type=Path, help="src/ of the commit before the audit log (the baseline)"
    )
    parser.add_argument(
        "--postgres", metavar="ADMIN_URL", help="run on fresh Postgres databases (default SQLite)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per target")
    parser.add_argument("--writes", type=int, default=300, help="PATCHes per workload, round and target")
    parser.add_argument("--clients", type=int, default=8, help="clients of the concurrent workload")
    parser.add_argument(
        "--append-only", action="store_true", help="in process: a write transaction with and without an entry"
    )
    args = parser.parse_args()
    if args.append_only:
        with tempfile.TemporaryDirectory(prefix="relay-bench-append-") as tmp:
            databases = Databases(args.postgres, Path(tmp))
            try:
                samples = asyncio.run(append_cost(databases.fresh(Path(tmp)), args.writes * args.rounds))
            finally:
                databases.drop_all()
        print(
            f"one write transaction (bump the catalog revision), {databases.kind}: "
            "base = without an entry, after = with one"
        )
        print(machine_line())
        headers = ["workload", "target", "writes", "p50 ms", "p99 ms", "mean ms"]
        print(markdown_table(headers, summary_rows(samples), [False, False, True, True, True, True]))
        return

    samples = Samples()
    with tempfile.TemporaryDirectory(prefix="relay-bench-writes-") as tmp, Processes() as procs:
        databases = Databases(args.postgres, Path(tmp))
        try:
            targets: dict[str, Relay] = {}
            for target in ("base", "after") if args.base_src else ("after",):
                workdir = Path(tmp) / target
                workdir.mkdir()
                extra = {"PYTHONPATH": str(args.base_src.resolve())} if target == "base" else {}
                targets[target] = start_relay(
                    procs, workdir, database_url=databases.fresh(workdir), extra_env=extra
                )
            if "base" in targets:  # the baseline really is the code before the log
                probe = httpx.get(
                    targets["base"].control_url + "/api/audit", headers=relay_admin(targets["base"])
                )
                if probe.status_code != 404:
                    raise SystemExit(f"--base-src serves /api/audit ({probe.status_code}): not a baseline")
            names = {target: prepare(relay, args.clients) for target, relay in targets.items()}
            for _ in range(args.rounds):
                for target, relay in targets.items():
                    samples.add(
                        "sequential", target, asyncio.run(patches(relay, names[target][:1], args.writes))
                    )
                    samples.add("concurrent", target, asyncio.run(patches(relay, names[target], args.writes)))
            with httpx.Client(timeout=30) as client:
                verdict = client.get(
                    targets["after"].control_url + "/api/audit/verify", headers=relay_admin(targets["after"])
                ).json()
        finally:
            procs.stop_all()
            databases.drop_all()
    print(
        f"control-plane writes: PATCH /api/policies/{{name}}, {databases.kind}, "
        f"{args.rounds} alternating rounds"
    )
    print(machine_line())
    print(
        markdown_table(
            ["workload", "target", "writes", "p50 ms", "p99 ms", "mean ms"],
            summary_rows(samples),
            [False, False, True, True, True, True],
        )
    )
    print(f"audit chain of 'after': {verdict}")


if __name__ == "__main__":
    main()
