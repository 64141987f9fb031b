"""How fast is the fake upstream? It must never be the bottleneck of a gateway benchmark.

Starts ``python -m relay.fake_upstream`` on 127.0.0.1, drives a small non-streaming chat request at
several concurrency levels for a bounded time each, and prints req/s, p50, p99 and the server's CPU time
per request. Uses ``wrk`` when installed (a C load generator), else an asyncio/aiohttp generator, which
is itself slower than the server and so only gives a lower bound; the output says which one ran.

    .venv/bin/python bench/fake_upstream_speed.py [--duration 5] [--concurrency 1,16,64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
BODY = {
    "model": "bench-model",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "Say hello to the benchmark"}],
}
AUTH = ("Authorization", "Bearer sk-bench")

WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["%(auth_name)s"] = "%(auth_value)s"
wrk.body = [==[%(body)s]==]
function done(summary, latency, requests)
  io.write(string.format('WRK_JSON {"requests":%%d,"duration_s":%%.3f,"p50_ms":%%.3f,"p99_ms":%%.3f,' ..
    '"errors":%%d,"non2xx":%%d}\\n', summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
"""


@dataclass
class Result:
    concurrency: int
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_ms_per_req: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def start_server() -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    cmd = [sys.executable, "-m", "relay.fake_upstream", "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 20)
    line = process.stdout.readline() if ready else ""
    if not line.startswith("fake-upstream listening on "):
        process.kill()
        raise SystemExit(f"fake upstream did not start: {line!r}")
    return process, line.rsplit(" ", 1)[-1].strip()


def cpu_seconds(pid: int) -> float:
    """utime + stime of the server from /proc (0 where /proc is unavailable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(wrk: str, url: str, concurrency: int, duration: float, threads: int, script: Path) -> Result:
    threads = min(threads, concurrency)
    cmd = [wrk, f"-t{threads}", f"-c{concurrency}", f"-d{duration:g}s", "-s", str(script), url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("WRK_JSON "))
    data = json.loads(line.removeprefix("WRK_JSON "))
    return Result(
        concurrency,
        data["requests"],
        data["duration_s"],
        data["p50_ms"],
        data["p99_ms"],
        data["errors"] + data["non2xx"],
        0.0,
    )


async def run_python(url: str, concurrency: int, duration: float) -> Result:
    import aiohttp

    payload = json.dumps(BODY).encode()
    headers = {"Content-Type": "application/json", AUTH[0]: AUTH[1]}
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while (start := time.perf_counter()) < deadline:
            async with session.post(url, data=payload, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
            latencies.append(time.perf_counter() - start)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else 0.0

    return Result(concurrency, len(latencies), elapsed, pct(0.50), pct(0.99), errors, 0.0)


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
    wrk = shutil.which("wrk") if args.generator in ("auto", "wrk") else None
    if args.generator == "wrk" and wrk is None:
        raise SystemExit("wrk not found")

    process, base_url = start_server()
    url = base_url + "/v1/chat/completions"
    results: list[Result] = []
    try:
        check = httpx.post(url, json=BODY, headers=[AUTH])
        check.raise_for_status()
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "post.lua"
            body = json.dumps(BODY)
            script.write_text(WRK_SCRIPT % {"auth_name": AUTH[0], "auth_value": AUTH[1], "body": body})
            for concurrency in levels:
                cpu_before = cpu_seconds(process.pid)
                if wrk:
                    result = run_wrk(wrk, url, concurrency, args.duration, args.threads, script)
                else:
                    result = asyncio.run(run_python(url, concurrency, args.duration))
                cpu = cpu_seconds(process.pid) - cpu_before
                result.cpu_ms_per_req = cpu * 1000 / result.requests if result.requests else 0.0
                results.append(result)
    finally:
        process.terminate()
        process.wait(timeout=10)

    generator = f"wrk ({args.threads} thread)" if wrk else "python asyncio+aiohttp (may be the bottleneck)"
    print(f"fake upstream: POST /v1/chat/completions, {args.duration:g} s per level, generator: {generator}")
    print(f"machine: {os.cpu_count()} CPU(s), server: 1 uvicorn process (uvloop + httptools)")
    print("| concurrency | req/s | p50 | p99 | errors | server CPU ms/req |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r.concurrency} | {r.rps:,.0f} | {r.p50_ms:.2f} ms | {r.p99_ms:.2f} ms | {r.errors} "
            f"| {r.cpu_ms_per_req:.3f} |"
        )


if __name__ == "__main__":
    main()
