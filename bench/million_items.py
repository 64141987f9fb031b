"""A million-item batch (SPEC §17 "Scale", issue benchmark (b)): submit time and peak RSS, items/s at
0 ms, status latency, results streaming time and peak RSS, and deleting it, on Postgres with each
payload store, next to a ``--baseline-items`` (50 000) batch measured the same way in the same run.

Per ``--payload-store`` (``files``, ``database``) and per size (the baseline first, then ``--items``),
on a fresh Postgres database created through ``--postgres`` (an admin URL; dropped at the end), with
the fake upstream at 0 ms (``python -m relay.fake_upstream``) and the catalog of ``live_overhead.py``:

1. **submit** — ``relay serve`` with ``RELAY_BATCH_WORKERS=0`` (nothing runs while it is measured),
   ``RELAY_BATCH_MAX_ITEMS`` = the size, ``RELAY_BATCH_MAX_BYTES`` 4 GiB. The body (``{"shape":
   "openai", "requests": […]}``, items of about ``--item-bytes``, each text different) is written to a
   file first and streamed from it; wall time from the first byte sent to the 202, and the relay's
   peak RSS (``VmHWM``: a fresh process, so the peak is this submit's). Then **status**: the median of
   ``--status-samples`` (20) ``GET /v1/batches/{id}?items=false`` on the idle relay.
2. **items/s at 0 ms** — the relay restarted on the same database and payload directory with
   ``RELAY_BATCH_WORKERS=16``: the items made final during ``--run-seconds`` (30, after a 3 s warm-up),
   from the status view's counts (itself constant-cost), divided by the time between the two reads;
   status latency again, while the workers run. Then **cancel**: ``POST /v1/batches/{id}/cancel`` wall
   time (every waiting item cancelled with its usage event, in chunks), and the wait for the running
   ones to finish.
3. **results** — the relay restarted again (``RELAY_BATCH_WORKERS=0``): ``GET /v1/batches/{id}/results
   ?format=jsonl`` read to the end as a stream, wall time and the relay's peak RSS (fresh process).
   Then **delete**: ``DELETE /api/batches/{id}`` (the retention sweep's deletion of one batch: items,
   bodies, in bounded chunks) wall time.

Restarts keep the master key (``RELAY_MASTER_KEY`` fixed per size) and the relay key. A benchmark, not a
test: it prints a table and exits 0 once it has measured. The load of the machine (``uptime``) is
printed next to the figures. About 10 minutes for both stores with the defaults on a 2-core machine.

    .venv/bin/python bench/million_items.py [--items 1000000] [--baseline-items 50000]
        [--item-bytes 512] [--run-seconds 30] [--status-samples 20] [--payload-store files,database]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres | --sqlite]

``--sqlite`` runs the same on embedded SQLite (a database file per size), which a million items must
survive too, slower.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import Databases, auth, item_body
from common import Processes, machine_line, markdown_table, proc_status_mib, start_fake_upstream
from live_overhead import Relay, configure, relay_admin
from live_overhead import start_relay as launch_relay

MAX_BYTES = 4 << 30
TARGET_RSS_MIB = 1024.0


def say(line: str) -> None:
    print(line, flush=True)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}"


def write_body(path: Path, n: int, size: int) -> int:
    """The submit body of ``n`` items, written a block at a time (never whole in this process)."""
    with path.open("wb") as out:
        out.write(b'{"shape": "openai", "requests": [')
        block: list[bytes] = []
        for idx in range(n):
            block.append((b"," if idx else b"") + orjson.dumps(item_body(idx, size)))
            if len(block) == 10_000:
                out.write(b"".join(block))
                block.clear()
        out.write(b"".join(block) + b"]}")
    return path.stat().st_size


def streamed(path: Path) -> Iterator[bytes]:
    with path.open("rb") as source:
        while block := source.read(1 << 20):
            yield block


@dataclass
class Figures:
    items: int
    store: str
    body_mb: float = 0.0
    submit_s: float = 0.0
    submit_rss: float = 0.0
    idle_rss: float = 0.0
    status_idle_ms: float = 0.0
    rate: float = 0.0
    status_busy_ms: float = 0.0
    cancel_s: float = 0.0
    cancelled: int = 0
    results_s: float = 0.0
    results_rss: float = 0.0
    results_rows: int = 0
    delete_s: float = 0.0
    loads: list[str] = field(default_factory=list)


class Size:
    """One size on one store: its database, payload directory and master key, across restarts."""

    def __init__(
        self, procs: Processes, dbs: Databases, tmp: Path, upstream: str, store: str, n: int
    ) -> None:
        self.procs, self.upstream, self.store, self.n = procs, upstream, store, n
        self.workdir = tmp / f"{store}-{n}-{uuid.uuid4().hex[:6]}"
        self.database_url = dbs.fresh(self.workdir)
        self.master_key = base64.b64encode(secrets.token_bytes(32)).decode()
        self.key = ""

    def start(self, workers: int) -> Relay:
        env = {
            "RELAY_BATCH_WORKERS": str(workers),
            "RELAY_BATCH_PAYLOAD_STORE": self.store,
            "RELAY_BATCH_MAX_ITEMS": str(self.n),
            "RELAY_BATCH_MAX_BYTES": str(MAX_BYTES),
            "RELAY_MASTER_KEY": self.master_key,
        }
        relay = launch_relay(self.procs, self.workdir, database_url=self.database_url, extra_env=env)
        if not self.key:
            self.key = configure(relay, self.upstream)
        return relay

    def stop(self, relay: Relay) -> None:
        if relay.process.poll() is not None:
            print(f"relay serve died:\n{relay.log_tail()}", file=sys.stderr)
        self.procs.stop(relay.process, timeout=60)


def status_ms(client: httpx.Client, url: str, samples: int) -> float:
    took = []
    for _ in range(samples):
        started = time.perf_counter()
        answer = client.get(url, params={"items": "false"})
        took.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
    return statistics.median(took)


def final_count(view: dict[str, Any]) -> int:
    return sum(view["counts"].get(state, 0) for state in ("completed", "discarded", "cancelled"))


def measure(args: argparse.Namespace, size: Size, body: Path, fig: Figures) -> None:
    fig.body_mb = body.stat().st_size / 1e6
    relay = size.start(0)
    try:
        pid = relay.process.pid
        fig.idle_rss = proc_status_mib(pid, "VmHWM")
        with httpx.Client(timeout=1800, headers=auth(size.key)) as client:
            fig.loads.append(load())
            started = time.perf_counter()
            answer = client.post(relay.base_url + "/v1/batches", content=streamed(body))
            fig.submit_s = time.perf_counter() - started
            fig.submit_rss = proc_status_mib(pid, "VmHWM")
            if answer.status_code != 202 or answer.json()["total_items"] != size.n:
                raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:300]}")
            batch_id = answer.json()["id"]
            url = f"{relay.base_url}/v1/batches/{batch_id}"
            fig.status_idle_ms = status_ms(client, url, args.status_samples)
        say(
            f"   submit {fig.submit_s:.1f} s, peak RSS {fig.submit_rss:.0f} MiB "
            f"(after boot {fig.idle_rss:.0f}); status {fig.status_idle_ms:.1f} ms ({fig.loads[-1]})"
        )
    finally:
        size.stop(relay)

    relay = size.start(args.workers)
    try:
        url = f"{relay.base_url}/v1/batches/{batch_id}"
        with httpx.Client(timeout=1800, headers=auth(size.key)) as client:
            time.sleep(3)  # warm-up: the pool's first claims
            fig.loads.append(load())
            first = client.get(url, params={"items": "false"}).json()
            t0 = time.perf_counter()
            time.sleep(args.run_seconds)
            last = client.get(url, params={"items": "false"}).json()
            fig.rate = (final_count(last) - final_count(first)) / (time.perf_counter() - t0)
            fig.status_busy_ms = status_ms(client, url, args.status_samples)
            started = time.perf_counter()
            client.post(url + "/cancel").raise_for_status()
            fig.cancel_s = time.perf_counter() - started
            deadline = time.monotonic() + 300
            while (view := client.get(url, params={"items": "false"}).json())["CompletedAt"] is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"batch not finished 300 s after its cancel: {view['counts']}")
                time.sleep(0.5)
            fig.cancelled = view["counts"].get("cancelled", 0)
        say(
            f"   {fig.rate:,.0f} items/s at 0 ms; status while running {fig.status_busy_ms:.1f} ms; "
            f"cancel of {fig.cancelled:,} waiting items {fig.cancel_s:.1f} s ({fig.loads[-1]})"
        )
    finally:
        size.stop(relay)

    relay = size.start(0)
    try:
        pid = relay.process.pid
        with httpx.Client(timeout=1800, headers=auth(size.key)) as client:
            fig.loads.append(load())
            started = time.perf_counter()
            rows = 0
            results_url = f"{relay.base_url}/v1/batches/{batch_id}/results?format=jsonl"
            with client.stream("GET", results_url) as answer:
                answer.raise_for_status()
                for line in answer.iter_lines():
                    rows += bool(line)
            fig.results_s = time.perf_counter() - started
            fig.results_rss = proc_status_mib(pid, "VmHWM")
            fig.results_rows = rows
        with httpx.Client(timeout=1800, headers=relay_admin(relay)) as admin:
            started = time.perf_counter()
            deleted = admin.delete(f"{relay.control_url}/api/batches/{batch_id}")
            fig.delete_s = time.perf_counter() - started
            if deleted.status_code != 204:
                raise RuntimeError(f"DELETE answered {deleted.status_code}: {deleted.text[:300]}")
        say(
            f"   results {rows:,} rows in {fig.results_s:.1f} s, peak RSS {fig.results_rss:.0f} MiB; "
            f"delete {fig.delete_s:.1f} s ({fig.loads[-1]})"
        )
    finally:
        size.stop(relay)


def table(figures: list[Figures]) -> str:
    rows = []
    for f in figures:
        rows.append(
            [
                f"{f.store} · {f.items:,}",
                f"{f.body_mb:,.0f} MB",
                f"{f.submit_s:.1f} s ({f.items / f.submit_s:,.0f}/s)" if f.submit_s else "–",
                f"{f.submit_rss:,.0f} MiB" + (" ✓" if 0 < f.submit_rss < TARGET_RSS_MIB else ""),
                f"{f.status_idle_ms:.1f} / {f.status_busy_ms:.1f} ms",
                f"{f.rate:,.0f}",
                f"{f.cancel_s:.1f} s",
                f"{f.results_s:.1f} s, {f.results_rss:,.0f} MiB",
                f"{f.delete_s:.1f} s",
                "; ".join(f.loads),
            ]
        )
    return markdown_table(
        [
            "store · items",
            "body",
            "submit → 202",
            "submit peak RSS",
            "status idle / running",
            "items/s at 0 ms",
            "cancel",
            "results (jsonl)",
            "delete",
            "load (1/5 min)",
        ],
        rows,
        [False, True, True, True, True, True, True, True, True, False],
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1_000_000, help="items of the big batch")
    parser.add_argument(
        "--baseline-items", type=int, default=50_000, help="items of the baseline batch (0: none)"
    )
    parser.add_argument("--item-bytes", type=int, default=512, help="approximate size of one item")
    parser.add_argument("--workers", type=int, default=16, help="RELAY_BATCH_WORKERS of the items/s phase")
    parser.add_argument("--run-seconds", type=float, default=30.0, help="how long the items/s phase runs")
    parser.add_argument("--status-samples", type=int, default=20, help="status reads per median")
    parser.add_argument("--payload-store", default="files,database", help="RELAY_BATCH_PAYLOAD_STORE values")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="an admin URL through which a fresh database is created per size and store",
    )
    parser.add_argument(
        "--sqlite", action="store_true", help="embedded SQLite instead of Postgres (correct, not fast)"
    )
    args = parser.parse_args()
    stores = [x.strip() for x in args.payload_store.split(",") if x.strip()]
    if not stores or set(stores) - {"files", "database"}:
        parser.error("--payload-store: a comma-separated list of files, database")
    sizes = [n for n in (args.baseline_items, args.items) if n > 0]
    if any(n > 1_000_000 for n in sizes):
        parser.error("RELAY_BATCH_MAX_ITEMS allows at most 1 000 000 items")

    say(f"A million-item batch (SPEC §17 Scale) — {machine_line()}")
    figures: list[Figures] = []
    started = time.monotonic()
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-bench-million-") as tmpdir:
        tmp = Path(tmpdir)
        dbs = Databases(None if args.sqlite else args.postgres, tmp)
        try:
            _fake, upstream = start_fake_upstream(procs)
            bodies = {}
            for n in sizes:
                bodies[n] = tmp / f"body-{n}.json"
                mb = write_body(bodies[n], n, args.item_bytes) / 1e6
                say(f"body of {n:,} items: {mb:,.0f} MB")
            for store in stores:
                for n in sizes:
                    say(f"\n== RELAY_BATCH_PAYLOAD_STORE={store}, {n:,} items")
                    fig = Figures(n, store)
                    figures.append(fig)
                    try:
                        measure(args, Size(procs, dbs, tmp, upstream, store, n), bodies[n], fig)
                    except (RuntimeError, OSError, httpx.HTTPError) as exc:
                        print(
                            f"{store} · {n:,} failed, reporting what was measured: {exc!r}", file=sys.stderr
                        )
        finally:
            procs.stop_all()
            dbs.drop_all()

    print()
    say(f"A million-item batch — {machine_line()}; {dbs.kind}; {time.monotonic() - started:.0f} s in all")
    say(
        f"items of ≈ {args.item_bytes} bytes; status = median of {args.status_samples} GET ?items=false; "
        f"items/s over {args.run_seconds:g} s with {args.workers} workers, fake upstream at 0 ms; "
        f"the first row of each store is the same-run baseline; ✓ = under SPEC §13's 1 GiB"
    )
    print()
    print(table(figures))
    print("(a benchmark, not a test: nothing here fails the build)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: every process this benchmark started has been stopped", file=sys.stderr)
        sys.exit(130)
