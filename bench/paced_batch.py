"""What does a paced batch cost live traffic under the same policy? SPEC §17: live requests keep
``limit − share`` of every window while a batch runs at its batch share.

Starts the fake upstream and one ``relay serve`` (embedded SQLite in a temporary directory, or a fresh
Postgres database with ``--postgres ADMIN_URL``; 16 batch workers; no Redis unless ``--redis``),
applies the minimal catalog of ``bench/live_overhead.py`` and gives its policy one rule, ``requests``
``--limit`` per second, and the batch block ``{pacing: wait, live_reserve: --reserve}``. Then, in one
run:

1. **live alone**: an open-loop generator at ``--rate`` live requests/s (below ``limit − share``) for
   ``--duration`` seconds → live req/s, p50, p99, refusals (429);
2. **live + paced batch**: a batch of ``--items`` items (default 50 000) is submitted under the same
   policy and, while it runs, the same live load again → the same figures, plus the batch's items/s
   over that time against its share per second (``floor(limit × (1 − reserve))``).

``--batch-replica`` (Postgres and Redis only) runs the deployment docs/batches.md recommends for an
untouched live tail: the measured relay serves live traffic with ``RELAY_BATCH_WORKERS=0``, and a
second ``relay serve`` on the same database, Redis and payload directory runs the 16 batch workers
(the batch is submitted to the first; the share is kept across both by the one limiter).

The batch is cancelled at the end and the relays stopped. ``--rounds N`` repeats both phases on a fresh
relay; ``--compare-src DIR`` (another checkout's ``src/``, e.g. a worktree of the base commit) runs the
same rounds on that code too, interleaved round by round (this checkout, then that one), so a change is
judged against a baseline measured in the same run on the same noisy machine. A benchmark, not a test:
it prints, and exits 0 once it measured.

    .venv/bin/python bench/paced_batch.py [--items 50000] [--rate 100] [--limit 400] [--reserve 0.5]
                                          [--duration 10] [--redis URL] [--postgres ADMIN_URL]
                                          [--rounds 1] [--compare-src ../base/src]
                                          [--batch-replica]
"""

from __future__ import annotations

import argparse
import base64
import math
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batch_throughput import Databases
from common import (
    CHAT_BODY,
    SRC,
    LoadResult,
    Processes,
    machine_line,
    markdown_table,
    ms,
    paced,
    run_async,
    start_fake_upstream,
)
from live_overhead import MODEL, configure, relay_admin, start_relay


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=50_000, help="batch items (default 50 000)")
    parser.add_argument("--rate", type=float, default=100.0, help="live requests per second")
    parser.add_argument("--limit", type=int, default=400, help="the policy's requests per second")
    parser.add_argument("--reserve", type=float, default=0.5, help="batch.live_reserve")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured phase")
    parser.add_argument("--redis", default=None, help="RELAY_REDIS_URL for the relay (default: none)")
    parser.add_argument(
        "--postgres", default=None, help="run relay on Postgres: an admin URL (a database is created per run)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="fresh relays per code under test")
    parser.add_argument(
        "--compare-src", type=Path, default=None, help="another checkout's src/ to interleave with"
    )
    parser.add_argument(
        "--batch-replica",
        action="store_true",
        help="live on a relay without batch workers, the batch on a second relay (needs --postgres, --redis)",
    )
    args = parser.parse_args()
    if args.batch_replica and not (args.postgres and args.redis):
        parser.error("--batch-replica needs --postgres and --redis (two replicas share them)")
    return args


def batch_counts(client: httpx.Client, base: str, batch_id: str, key: str) -> dict[str, int]:
    view = client.get(f"{base}/v1/batches/{batch_id}", headers={"Authorization": f"Bearer {key}"}).json()
    return dict(view["counts"])


@dataclass
class Measured:
    alone: LoadResult
    beside: LoadResult
    items_per_s: float
    discarded: int


def measure(
    args: argparse.Namespace, procs: Processes, upstream: str, dbs: Databases, workdir: Path, src: Path
) -> Measured:
    """One fresh relay running ``src``: live alone, then live beside a paced batch."""
    env = {
        "RELAY_BATCH_WORKERS": "16",
        "RELAY_BATCH_MAX_ITEMS": str(max(args.items, 50_000)),
        "PYTHONPATH": str(src),
    }
    if args.redis:
        env["RELAY_REDIS_URL"] = args.redis
    database_url = dbs.fresh(workdir)
    worker = None
    if args.batch_replica:  # the replicas share the database, Redis, the master key and the admin token
        env["RELAY_MASTER_KEY"] = base64.b64encode(secrets.token_bytes(32)).decode()
        env["RELAY_ADMIN_TOKEN"] = "bench-admin-" + secrets.token_urlsafe(24)
        env["RELAY_BATCH_PAYLOAD_DIR"] = str(workdir / "shared-batch-payloads")  # the shared volume
        live_env = dict(env, RELAY_BATCH_WORKERS="0")
        relay = start_relay(procs, workdir / "live", database_url=database_url, extra_env=live_env)
    else:
        relay = start_relay(procs, workdir, database_url=database_url, extra_env=env)
    try:
        if args.batch_replica:
            worker = start_relay(procs, workdir / "batch", database_url=database_url, extra_env=env)
        key = configure(relay, upstream)
        with httpx.Client(timeout=120) as client:
            policy: dict[str, Any] = {
                "rate_limit": {"rules": [{"meter": "requests", "limit": args.limit, "window": "1s"}]},
                "batch": {"pacing": "wait", "live_reserve": args.reserve},
            }
            patched = client.patch(
                relay.control_url + "/api/policies/bench", json=policy, headers=relay_admin(relay)
            )
            if patched.status_code != 200:
                raise SystemExit(f"PATCH /api/policies/bench answered {patched.status_code}: {patched.text}")
            time.sleep(1.0)  # the relay's snapshot picks the change up (a local write swaps at once)
            headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
            body = orjson.dumps(CHAT_BODY)
            url = relay.base_url + "/v1/chat/completions"

            alone = run_async(paced(url, body, headers, args.rate, args.duration))

            items = [
                {"model": MODEL, "messages": [{"role": "user", "content": f"item {i}"}]}
                for i in range(args.items)
            ]
            submitted = client.post(
                relay.base_url + "/v1/batches",
                content=orjson.dumps({"shape": "openai", "requests": items}),
                headers=headers,
            )
            if submitted.status_code != 202:
                raise SystemExit(f"POST /v1/batches answered {submitted.status_code}: {submitted.text}")
            batch_id = submitted.json()["id"]
            time.sleep(2.0)  # let the batch reach its share before measuring
            before = batch_counts(client, relay.base_url, batch_id, key)
            started = time.monotonic()
            beside = run_async(paced(url, body, headers, args.rate, args.duration))
            elapsed = time.monotonic() - started
            after = batch_counts(client, relay.base_url, batch_id, key)
            if after.get("discarded", 0):  # say why, so a broken run is not read as a slow one
                results = client.get(
                    f"{relay.base_url}/v1/batches/{batch_id}/results?format=jsonl",
                    headers={"Authorization": f"Bearer {key}"},
                )
                failed = [line for line in results.text.splitlines() if '"error"' in line][:1]
                print(f"first discarded item: {failed[0][:300] if failed else results.text[:300]}")
            client.post(relay.base_url + f"/v1/batches/{batch_id}/cancel", headers=headers)
    finally:
        procs.stop(relay.process)
        if worker is not None:
            procs.stop(worker.process)
    done = after.get("completed", 0) - before.get("completed", 0)
    return Measured(alone, beside, done / elapsed, after.get("discarded", 0))


def rows_of(label: str, runs: list[Measured], share: int) -> list[list[str]]:
    rows = []
    for i, run in enumerate(runs, 1):
        name = f"{label} #{i}" if len(runs) > 1 else label
        alone, beside = run.alone, run.beside
        p50, p99 = ms(alone.p50_ms), ms(alone.p99_ms)
        rows.append([name, "live alone", f"{alone.rps:.0f}", p50, p99, str(alone.errors), "—"])
        rows.append(
            [
                name,
                "live + paced batch",
                f"{beside.rps:.0f}",
                ms(beside.p50_ms),
                ms(beside.p99_ms),
                str(beside.errors),
                f"{run.items_per_s:.0f} of {share} ({run.items_per_s / share:.0%}), "
                f"{run.discarded} discarded",
            ]
        )
    return rows


def main() -> None:
    args = parse_args()
    share = max(1, math.floor(args.limit * (1 - args.reserve)))
    codes = [("this checkout", SRC)]
    if args.compare_src is not None:
        codes.append((f"{args.compare_src}", args.compare_src.resolve()))
    results: dict[str, list[Measured]] = {label: [] for label, _ in codes}
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-paced-") as tmp:
        dbs = Databases(args.postgres, Path(tmp))
        try:
            _fake, upstream = start_fake_upstream(procs)
            for round_no in range(args.rounds):
                for n, (label, src) in enumerate(codes):
                    workdir = Path(tmp) / f"relay-{round_no}-{n}"
                    results[label].append(measure(args, procs, upstream, dbs, workdir, src))
        finally:
            dbs.drop_all()
    print(machine_line())
    print(
        f"{dbs.kind}{', Redis' if args.redis else ''}"
        f"{'; live on a relay without batch workers, the batch on a second' if args.batch_replica else ''}"
        f"; policy: {args.limit} requests/s, live_reserve "
        f"{args.reserve:g} → batch share {share}/s, live keeps {args.limit - share}/s; live load "
        f"{args.rate:g} req/s for {args.duration:g} s per phase; batch of {args.items} items"
    )
    rows = [row for label, _ in codes for row in rows_of(label, results[label], share)]
    print(
        markdown_table(
            ["code", "phase", "live req/s", "p50 ms", "p99 ms", "live errors", "batch items/s of share"],
            rows,
            [False, False, True, True, True, True, False],
        )
    )


if __name__ == "__main__":
    main()
