"""Which HTTP client should Relay use to call upstreams? Measured, not guessed.

One asyncio process POSTs the same small chat body to the fake upstream (another process) with

- **aiohttp** — one ``ClientSession``, ``TCPConnector(limit=0)``, configured like
  Relay's client was before it had its own (``auto_decompress=False``, no User-Agent/Accept-Encoding);
- **httpx** — one ``AsyncClient`` (HTTP/1.1, connection pool sized to the concurrency);
- **relay** — Relay's own client, ``relay.upstream.Upstream`` (``src/relay/upstream/``), as the pipeline
  calls it (``post``, then ``read``);

at concurrency 1 and 32 (closed loop: each worker sends again as soon as its answer is read), for a few
seconds each after a short warm-up, on asyncio's default event loop (what ``relay serve`` runs on) and on
uvloop. It reports req/s, p50/p99 and the **client process's CPU time per request**
(``time.process_time``), the figure that decides how much of a gateway's per-request budget the client
eats.

A second, smaller table (``--servers``, on by default) does the same for the server side: the fake
upstream's ASGI app under uvicorn with ``http=httptools`` or ``h11`` and ``loop=asyncio`` or ``uvloop``,
driven by the aiohttp client at concurrency 32; it reports the server's CPU per request (from /proc).

    .venv/bin/python bench/upstream_clients.py [--duration 3] [--concurrency 1,32] [--no-servers]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CHAT_BODY,
    SRC,
    CpuMeter,
    LoadResult,
    Processes,
    closed_loop,
    free_port,
    from_latencies,
    machine_line,
    markdown_table,
    run_async,
    start_fake_upstream,
)

HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench-upstream"}
Post = Callable[[], Awaitable[None]]


@dataclass
class ClientRow:
    loop: str
    client: str
    concurrency: int
    result: LoadResult
    cpu_ms: float


async def drive(post: Post, concurrency: int, duration: float) -> tuple[LoadResult, float]:
    """Closed loop with ``concurrency`` workers; returns the result and the process CPU seconds used."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration

    async def worker() -> None:
        nonlocal errors
        while (start := time.perf_counter()) < deadline:
            try:
                await post()
            except Exception:  # any client error counts; the run goes on
                errors += 1
                continue
            latencies.append(time.perf_counter() - start)

    cpu0 = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu0
    return from_latencies(latencies, elapsed, errors), cpu


async def with_aiohttp(
    url: str, body: bytes, concurrency: int, warmup: float, duration: float
) -> tuple[LoadResult, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, connect=10, sock_read=300),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    ) as session:

        async def post() -> None:
            async with session.post(url, data=body, headers=HEADERS, allow_redirects=False) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(response.status)

        await drive(post, concurrency, warmup)
        return await drive(post, concurrency, duration)


async def with_httpx(
    url: str, body: bytes, concurrency: int, warmup: float, duration: float
) -> tuple[LoadResult, float]:
    limits = httpx.Limits(max_connections=max(concurrency, 1), max_keepalive_connections=max(concurrency, 1))
    async with httpx.AsyncClient(limits=limits, http1=True, http2=False, timeout=300) as client:

        async def post() -> None:
            response = await client.post(url, content=body, headers=HEADERS)
            if response.status_code != 200:
                raise RuntimeError(response.status_code)

        await drive(post, concurrency, warmup)
        return await drive(post, concurrency, duration)


async def with_relay(
    url: str, body: bytes, concurrency: int, warmup: float, duration: float
) -> tuple[LoadResult, float]:
    from relay.upstream import Upstream

    client = Upstream(timeout_s=300)
    await client.start()
    try:

        async def post() -> None:
            response = await client.post(url, HEADERS, body)
            await response.read()
            if response.status != 200:
                raise RuntimeError(response.status)

        await drive(post, concurrency, warmup)
        return await drive(post, concurrency, duration)
    finally:
        await client.close()


def run_on(loop_name: str, coro: Awaitable[tuple[LoadResult, float]]) -> tuple[LoadResult, float]:
    if loop_name == "uvloop":
        result: tuple[LoadResult, float] = run_async(coro)
        return result
    return asyncio.run(coro)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------- server side

SERVER_CODE = """
import sys, uvicorn
from relay.fake_upstream import FakeConfig, build_app
from relay.fake_upstream.server import bind_socket
sock = bind_socket("127.0.0.1", int(sys.argv[1]))
config = uvicorn.Config(build_app(FakeConfig()), loop=sys.argv[2], http=sys.argv[3], lifespan="off",
                        access_log=False, log_level="warning", proxy_headers=False, server_header=False)
uvicorn.Server(config).run(sockets=[sock])
"""


def measure_server(
    procs: Processes, loop_name: str, http: str, body: bytes, concurrency: int, warmup: float, duration: float
) -> tuple[LoadResult, float]:
    port = free_port()
    process = procs.start(
        [sys.executable, "-c", SERVER_CODE, str(port), loop_name, http],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"uvicorn ({loop_name}, {http}) did not start")
            time.sleep(0.05)
        run_async(closed_loop(url, body, HEADERS, concurrency, warmup))
        meter = CpuMeter({"server": process.pid})
        meter.start()
        result: LoadResult = run_async(closed_loop(url, body, HEADERS, concurrency, duration))
        meter.stop()
    finally:
        procs.stop(process)
    return result, meter.seconds["server"] * 1000 / (result.requests or 1)


# --------------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--loops", default="asyncio,uvloop", help="event loops for the client runs")
    parser.add_argument("--no-servers", action="store_true", help="skip the uvicorn httptools/h11 table")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    loops = [x.strip() for x in args.loops.split(",") if x.strip()]
    body = json.dumps(CHAT_BODY, separators=(",", ":")).encode()

    rows: list[ClientRow] = []
    server_rows: list[tuple[str, str, LoadResult, float]] = []
    with Processes() as procs:
        fake, base_url = start_fake_upstream(procs)
        url = base_url + "/v1/chat/completions"
        httpx.post(url, content=body, headers=HEADERS).raise_for_status()
        for loop_name in loops:
            for concurrency in levels:
                for client, fn in (("aiohttp", with_aiohttp), ("httpx", with_httpx), ("relay", with_relay)):
                    result, cpu = run_on(loop_name, fn(url, body, concurrency, args.warmup, args.duration))
                    cpu_ms = cpu * 1000 / (result.requests or 1)
                    rows.append(ClientRow(loop_name, client, concurrency, result, cpu_ms))
                    print(
                        f"   {loop_name:<7} {client:<7} c={concurrency:<3} {result.rps:8,.0f} req/s "
                        f"p50 {result.p50_ms:6.2f} ms p99 {result.p99_ms:6.2f} ms "
                        f"client CPU {cpu_ms:.3f} ms/req errors {result.errors}",
                        flush=True,
                    )
        procs.stop(fake)
        if not args.no_servers:
            for loop_name in ("asyncio", "uvloop"):
                for http in ("httptools", "h11"):
                    result, cpu_ms = measure_server(
                        procs, loop_name, http, body, 32, args.warmup, args.duration
                    )
                    server_rows.append((loop_name, http, result, cpu_ms))
                    print(
                        f"   server {loop_name:<7} {http:<9} {result.rps:8,.0f} req/s "
                        f"server CPU {cpu_ms:.3f} ms/req",
                        flush=True,
                    )

    print()
    print(f"upstream HTTP clients — {machine_line()}")
    print(
        f"one client process → fake upstream (uvloop + httptools, another process); closed loop, "
        f"{args.warmup:g} s warm-up + {args.duration:g} s per run; client CPU = time.process_time / requests"
    )
    table = [
        [
            r.loop,
            r.client,
            str(r.concurrency),
            f"{r.result.rps:,.0f}",
            f"{r.result.p50_ms:.2f} ms",
            f"{r.result.p99_ms:.2f} ms",
            f"{r.cpu_ms:.3f}",
            str(r.result.errors),
        ]
        for r in rows
    ]
    print(
        markdown_table(
            ["event loop", "client", "conc.", "req/s", "p50", "p99", "client CPU ms/req", "errors"],
            table,
            [False, False, True, True, True, True, True, True],
        )
    )
    for loop_name in loops:
        for concurrency in levels:
            pair = {r.client: r for r in rows if r.loop == loop_name and r.concurrency == concurrency}
            if not pair.get("aiohttp") or not pair["aiohttp"].cpu_ms:
                continue
            for other in ("httpx", "relay"):
                if other in pair:
                    ratio = pair[other].cpu_ms / pair["aiohttp"].cpu_ms
                    print(f"   {loop_name}, c={concurrency}: {other} uses {ratio:.2f}× aiohttp's CPU")
    if server_rows:
        print()
        print("server side: the fake upstream's app under uvicorn, aiohttp client (uvloop) at concurrency 32")
        print(
            markdown_table(
                ["event loop", "uvicorn http", "req/s", "p50", "p99", "server CPU ms/req"],
                [
                    [lp, http, f"{r.rps:,.0f}", f"{r.p50_ms:.2f} ms", f"{r.p99_ms:.2f} ms", f"{cpu:.3f}"]
                    for lp, http, r, cpu in server_rows
                ],
                [False, False, True, True, True, True],
            )
        )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: every process this benchmark started has been stopped", file=sys.stderr)
        sys.exit(130)
