"""What does an idle ``relay serve`` cost in CPU? (Issue 33: an idle relay's CPU is paid by every request
of a light load: 20 ms a second is 0.04 ms per request at 500 req/s.)

Starts the fake upstream and ``relay serve`` as ``live_overhead.py`` does (embedded SQLite, log level
``info``, no batch workers, the benchmarks' catalog and one relay key), answers one request, waits
``--settle`` seconds, then reads the process's CPU time (utime + stime from ``/proc``) over
``--seconds`` with no traffic at all: what its background loops, timers and polls cost.
``--base-src DIR`` (another checkout's ``src/``) measures that build too, alternating with this one in
each of ``--rounds`` rounds (a fresh process each time). Prints each run and the medians. A benchmark,
not a test: it prints, and exits 0.

    .venv/bin/python bench/idle_cpu.py [--seconds 20] [--rounds 3] [--base-src ../base/src]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from common import SRC, Processes, cpu_seconds, machine_line, start_fake_upstream
from live_overhead import configure, start_relay


def idle_ms_per_s(procs: Processes, upstream: str, src: Path, seconds: float, settle: float) -> float:
    with tempfile.TemporaryDirectory(prefix="relay-idle-") as tmp:
        relay = start_relay(procs, Path(tmp), log_level="info", src=src)
        try:
            configure(relay, upstream)  # applies the catalog and answers one request through Relay
            time.sleep(settle)
            before, started = cpu_seconds(relay.process.pid), time.monotonic()
            time.sleep(seconds)
            return (cpu_seconds(relay.process.pid) - before) / (time.monotonic() - started) * 1000
        finally:
            relay.process.terminate()
            relay.process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base-src", type=Path, default=None, help="another checkout's src/, alternated")
    args = parser.parse_args()
    print(machine_line())
    builds = [("this", SRC)] + ([("base", args.base_src.resolve())] if args.base_src else [])
    found: dict[str, list[float]] = {}
    with Processes() as procs:
        _fake, upstream = start_fake_upstream(procs)
        for n in range(args.rounds):
            for name, src in builds if n % 2 == 0 else builds[::-1]:
                value = idle_ms_per_s(procs, upstream, src, args.seconds, args.settle)
                found.setdefault(name, []).append(value)
                print(f"round {n + 1} {name}: {value:.1f} ms of CPU per second idle", flush=True)
    print(f"\nidle relay serve, CPU ms per second over {args.seconds:g} s, medians of {args.rounds}:")
    for name, values in found.items():
        low, high = min(values), max(values)
        print(f"  {name:<5} {statistics.median(values):5.1f} ({low:.1f}–{high:.1f})")


if __name__ == "__main__":
    main()
