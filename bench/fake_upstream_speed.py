"""How fast is the fake upstream? It must never be the bottleneck of a gateway benchmark.

Starts ``python -m relay.fake_upstream`` on 127.0.0.1, drives a small non-streaming chat request at
several concurrency levels for a bounded time each, and prints req/s, p50, p99 and the server's CPU time
per request. Uses ``wrk`` when installed (a C load generator), else an asyncio/aiohttp generator, which
is itself slower than the server and so only gives a lower bound; the output says which one ran.

    .venv/bin/python bench/fake_upstream_speed.py [--duration 5] [--concurrency 1,16,64]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CHAT_BODY,
    CpuMeter,
    LoadResult,
    Processes,
    closed_loop,
    find_wrk,
    machine_line,
    run_async,
    run_wrk,
    start_fake_upstream,
    write_wrk_script,
    wrk_version,
)

HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per concurrency level")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--generator", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (1 leaves a core to the server)")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    wrk = find_wrk(args.generator)
    body = json.dumps(CHAT_BODY).encode()

    results: list[tuple[int, LoadResult, float]] = []
    with Processes() as procs, tempfile.TemporaryDirectory() as tmp:
        process, base_url = start_fake_upstream(procs)
        url = base_url + "/v1/chat/completions"
        httpx.post(url, content=body, headers=HEADERS).raise_for_status()
        script = write_wrk_script(Path(tmp) / "post.lua", body, HEADERS)
        for concurrency in levels:
            meter = CpuMeter({"server": process.pid})
            meter.start()
            if wrk:
                result = run_wrk(wrk, url, script, concurrency, args.duration, args.threads)
            else:
                result = run_async(closed_loop(url, body, HEADERS, concurrency, args.duration))
            meter.stop()
            cpu_ms = meter.seconds["server"] * 1000 / result.requests if result.requests else 0.0
            results.append((concurrency, result, cpu_ms))

    generator = (
        f"{wrk_version(wrk)} ({args.threads} thread)"
        if wrk
        else "python asyncio+aiohttp (may be the bottleneck)"
    )
    print(f"fake upstream: POST /v1/chat/completions, {args.duration:g} s per level, generator: {generator}")
    print(f"{machine_line()}; server: 1 uvicorn process (uvloop + httptools)")
    print("| concurrency | req/s | p50 | p99 | errors | server CPU ms/req |")
    print("|---:|---:|---:|---:|---:|---:|")
    for concurrency, r, cpu_ms in results:
        print(
            f"| {concurrency} | {r.rps:,.0f} | {r.p50_ms:.2f} ms | {r.p99_ms:.2f} ms | {r.errors} "
            f"| {cpu_ms:.3f} |"
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: every process this benchmark started has been stopped", file=sys.stderr)
        sys.exit(130)
