"""The floor proxy on uvicorn + httptools against the same app on granian: which server stack is cheaper.

``bench/floor_proxy.py``'s ``FloorProxy`` (parse, rewrite ``model``, forward with aiohttp; nothing
else) served twice in front of one fake upstream — by uvicorn + httptools on uvloop (``floor_proxy.py``
itself, as ``relay serve`` runs) and by granian (ASGI interface, uvloop, HTTP/1, one worker; this
module's ``app``) — then a closed loop at 1 and 16 connections and a paced 500 req/s against each,
interleaved round by round (every other round in reverse order). Prints each one's CPU ms per request
(the server's processes: granian's supervisor and its worker) and p50/p99, and the medians.

granian is not one of Relay's dependencies: install it into the venv first (``.venv/bin/pip install
granian``). Figures and the verdict: docs/benchmarks.md, "The upstream client: aiohttp vs httpx".

    .venv/bin/python bench/granian_floor.py [--rounds 3] [--duration 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx

from common import (
    CHAT_BODY,
    CpuMeter,
    LoadResult,
    Processes,
    closed_loop,
    free_port,
    paced,
    run_async,
    start_fake_upstream,
)
from floor_proxy import FloorProxy

_proxy: FloorProxy | None = None


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The floor proxy as granian runs it (``FLOOR_UPSTREAM`` names the fake upstream)."""
    global _proxy
    if _proxy is None:
        _proxy = FloorProxy(os.environ["FLOOR_UPSTREAM"], "sk-bench-upstream", "bench-model")
        await _proxy.start()
    if scope["type"] == "lifespan":
        while True:
            kind = (await receive())["type"]
            await send({"type": kind + ".complete"})  # lifespan.startup / lifespan.shutdown
            if kind == "lifespan.shutdown":
                return
    await _proxy(scope, receive, send)


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == pid:
                found.append(int(entry.name))
    return found


def main() -> None:
    raw_help = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw_help)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    args = parser.parse_args()
    from live_overhead import start_floor_proxy

    body = json.dumps(CHAT_BODY, separators=(",", ":")).encode()
    here = Path(__file__).resolve().parent
    with Processes() as procs:
        fake, upstream = start_fake_upstream(procs)
        uvicorn_floor, uvicorn_base = start_floor_proxy(procs, upstream)
        port = free_port()
        options = ["--interface", "asgi", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        options += ["--loop", "uvloop", "--http", "1", "--no-ws", "--log-level", "warning"]
        granian = procs.start(
            [str(Path(sys.executable).parent / "granian"), *options, "granian_floor:app"],
            env=dict(os.environ, FLOOR_UPSTREAM=upstream, PYTHONPATH=str(here)),
        )
        granian_base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.post(granian_base + "/v1/chat/completions", content=body).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("granian did not answer within 20 s")
            time.sleep(0.1)
        servers = {
            "uvicorn": (uvicorn_base, [uvicorn_floor.pid]),
            "granian": (granian_base, [granian.pid, *children(granian.pid)]),
        }
        Load = Callable[[str, float], Coroutine[Any, Any, LoadResult]]
        loads: dict[str, Load] = {
            "1 connection": lambda url, d: closed_loop(url, body, {}, 1, d),
            "16 connections": lambda url, d: closed_loop(url, body, {}, 16, d),
            "paced 500 req/s": lambda url, d: paced(url, body, {}, 500, d),
        }
        results: dict[tuple[str, str], list[tuple[float, LoadResult]]] = {}
        for round_no in range(args.rounds):
            order = list(servers.items())
            for load_name, load in loads.items():
                for name, (base, pids) in order if round_no % 2 == 0 else order[::-1]:
                    url = base + "/v1/chat/completions"
                    run_async(load(url, 1.0))
                    meter = CpuMeter({str(pid): pid for pid in pids})
                    meter.start()
                    result = run_async(load(url, args.duration))
                    meter.stop()
                    cpu_ms = sum(meter.seconds.values()) * 1000 / (result.requests or 1)
                    results.setdefault((load_name, name), []).append((cpu_ms, result))
                    print(
                        f"round {round_no + 1} {load_name:<16} {name:<8} {result.rps:7,.0f} req/s  CPU "
                        f"{cpu_ms:.3f} ms/req  p50 {result.p50_ms:.2f}  p99 {result.p99_ms:.2f}  "
                        f"others {meter.others_cores:.2f} cores",
                        flush=True,
                    )
        print("\nmedians:")
        for (load_name, name), rows in results.items():
            cpu = statistics.median(ms for ms, _ in rows)
            p50 = statistics.median(r.p50_ms for _, r in rows)
            p99 = statistics.median(r.p99_ms for _, r in rows)
            print(f"  {load_name:<16} {name:<8} CPU {cpu:.3f} ms/req  p50 {p50:.2f} ms  p99 {p99:.2f} ms")
        fake.poll()


if __name__ == "__main__":
    main()
