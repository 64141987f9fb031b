"""Does ``relay serve`` grow with the requests it has served? (SPEC §13; the target: RSS after 1 million
requests within 10 % of RSS after 10 000.)

Starts the fake upstream and one ``relay serve`` exactly as ``bench/live_overhead.py`` does (embedded
SQLite, log level ``info``: one access-log line per request into a file, usage events written), then
sends ``--requests`` (1 000 000) chat completions through it from ``--concurrency`` (16) asyncio
connections. Every request has a body of its own (so nothing in Relay sees the same text twice: a
cache keyed by content would grow), every ``--stream-every`` (10th) is streamed, and one in
``--error-every`` (50) names a model that does not exist (a 404 with a did-you-mean, and a usage event
of its own). Relay's ``VmRSS`` and ``VmHWM`` are read at each checkpoint (10 000, then each tenth of
the run); the baseline is the RSS after 10 000 requests, in the same run. Also printed: requests per
second and Relay's CPU ms per request between checkpoints (the rate at which it works must not fall as
it ages), and the machine's load.

A benchmark, not a test: it prints and exits 0.

    .venv/bin/python bench/rss_growth.py [--requests 1000000] [--concurrency 16] [--stream-every 10]
        [--error-every 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from common import (
    CHAT_BODY,
    Processes,
    cpu_seconds,
    machine_line,
    markdown_table,
    proc_status_mib,
    start_fake_upstream,
)
from live_overhead import configure, start_relay

WARM = 10_000


async def drive(
    url: str, key: str, total: int, concurrency: int, stream_every: int, error_every: int, checkpoint
) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Send ``total`` requests; call ``checkpoint(sent)`` whenever a checkpoint count is passed."""
    import aiohttp

    sent = 0
    statuses: dict[str, int] = {}
    marks = sorted({WARM, *(m for m in (total * k // 10 for k in range(1, 11)) if m > WARM)})
    next_mark = 0
    lock = asyncio.Lock()
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}

    def body(n: int) -> bytes:
        data = dict(CHAT_BODY)
        data["messages"] = [
            {"role": "user", "content": f"request {n} of the rss bench: {os.urandom(6).hex()}"}
        ]
        if error_every and n % error_every == 0:
            data["model"] = "bench-modle"  # a typo: 404 with a suggestion
        if stream_every and n % stream_every == 0:
            data["stream"] = True
        return json.dumps(data, separators=(",", ":")).encode()

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal sent, next_mark
        while True:
            async with lock:
                if sent >= total:
                    return
                sent += 1
                n = sent
            try:
                async with session.post(url, data=body(n), headers=headers) as response:
                    await response.read()
                    status = str(response.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                status = type(exc).__name__
            statuses[status] = statuses.get(status, 0) + 1
            while next_mark < len(marks) and sum(statuses.values()) >= marks[next_mark]:
                checkpoint(marks[next_mark])
                next_mark += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--stream-every", type=int, default=10)
    parser.add_argument("--error-every", type=int, default=50)
    args = parser.parse_args()
    if args.requests < WARM * 2:
        raise SystemExit(f"--requests must be at least {WARM * 2}: the baseline is taken after {WARM}")

    print(machine_line())
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-rss-") as tmp:
        _, upstream = start_fake_upstream(procs)
        relay = start_relay(procs, Path(tmp), log_level="info")
        key = configure(relay, upstream)
        pid = relay.process.pid
        rows: list[list[str]] = []
        base: list[float] = []
        last = [time.perf_counter(), cpu_seconds(pid), 0]

        def checkpoint(done: int) -> None:
            now, cpu = time.perf_counter(), cpu_seconds(pid)
            rss, hwm = proc_status_mib(pid, "VmRSS"), proc_status_mib(pid, "VmHWM")
            if not base:
                base.append(rss)
            span = done - last[2]
            rate = span / (now - last[0]) if now > last[0] else 0.0
            cpu_ms = (cpu - last[1]) * 1000 / span if span else 0.0
            growth = (rss / base[0] - 1) * 100
            rows.append(
                [f"{done:,}", f"{rss:.1f}", f"{hwm:.1f}", f"{growth:+.1f} %", f"{rate:,.0f}", f"{cpu_ms:.3f}"]
            )
            print(
                f"  {done:>9,} requests: RSS {rss:.1f} MiB ({growth:+.1f} %), peak {hwm:.1f}, "
                f"{rate:,.0f} req/s, {cpu_ms:.3f} ms CPU/request; {os.getloadavg()[0]:.1f} load",
                flush=True,
            )
            last[:] = [now, cpu, done]

        url = relay.base_url + "/v1/chat/completions"
        statuses = asyncio.run(
            drive(url, key, args.requests, args.concurrency, args.stream_every, args.error_every, checkpoint)
        )
        print()
        print(
            markdown_table(
                ["requests", "RSS MiB", "peak MiB", "vs 10 000", "req/s", "CPU ms/req"], rows, [True] * 6
            )
        )
        print(f"\nanswers: {dict(sorted(statuses.items()))}")
        final = float(rows[-1][1])
        verdict = "PASS" if final <= base[0] * 1.10 else "MISS"
        print(
            f"RSS after {args.requests:,} requests {final:.1f} MiB vs {base[0]:.1f} MiB after {WARM:,}: "
            f"{(final / base[0] - 1) * 100:+.1f} % (target within 10 %): {verdict}"
        )


if __name__ == "__main__":
    main()
