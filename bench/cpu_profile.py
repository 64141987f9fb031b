"""Where ``relay serve``'s CPU goes per proxied request: py-spy samples sorted into a request's parts.

Starts the fake upstream and one ``relay serve`` as ``live_overhead.py`` does (embedded SQLite, log level
``--log-level``, default ``info``; ``--redis`` for state in Redis), then for each load — a closed loop at
1 and at 16 connections and the paced 500 req/s — runs ``py-spy record --native --gil`` (the thread
holding the GIL only) on Relay's process for ``--duration`` seconds
while the python generator drives it. Each sample is put in the first category its stack meets from
the innermost frame out (so ``orjson`` under the log writer is logging, a native frame under no
matching Python frame is the event loop):

- **server parsing / response writing**: uvicorn, httptools, ``relay.http`` (request and response
  sides are told apart by the function: ``send``/``write`` frames are writing);
- **routing / auth / limits**: ``relay.request``, ``relay.inference``, ``relay.snapshot``,
  ``relay.adapters``;
- **upstream client**: aiohttp, ``relay.upstream``;
- **usage event**: ``relay.usage`` (the event builder, the writer, SQLite's thread);
- **logging**: the ``logging`` module, ``relay.telemetry.logs``, ``relay.telemetry.access_log``;
- **metrics**: ``prometheus_client``, ``relay.telemetry.metrics``;
- **event loop and kernel**: uvloop and native frames with no Python frame above them that matched.

Prints, per load, each category's share of the samples and of the CPU per request (the share times
Relay's CPU per request, read from ``/proc`` around the same run). Needs ``py-spy`` on ``PATH`` or in
the venv (``pip install py-spy``) and the right to trace the process (root, or ptrace_scope 0).

    .venv/bin/python bench/cpu_profile.py [--duration 15] [--rate 500] [--log-level info] [--redis URL]
                                          [--src OTHER_TREE/src]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import (
    CHAT_BODY,
    CpuMeter,
    Processes,
    closed_loop,
    machine_line,
    paced,
    run_async,
    start_fake_upstream,
)
from live_overhead import configure, start_relay

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("logging", ("logging/__init__", "logging/handlers", "telemetry/logs", "telemetry/access_log")),
    ("metrics", ("prometheus_client", "telemetry/metrics")),
    ("usage event", ("relay/usage/", "aiosqlite", "sqlalchemy", "sqlite3")),
    ("upstream client", ("aiohttp", "relay/upstream", "yarl", "multidict")),
    ("tracing", ("telemetry/tracing",)),
    ("routing / auth / limits", ("relay/request/", "relay/inference/", "relay/snapshot", "relay/adapters")),
    ("server", ("uvicorn", "httptools", "relay/http/", "starlette")),
)
WRITE_FUNCTIONS = ("send", "write", "_write", "send_bytes", "head")


def categorize(stack: str) -> str:
    """The category of one collapsed stack (outermost frame first, ``;``-separated)."""
    frames = stack.split(";")
    for frame in reversed(frames):
        for name, needles in CATEGORIES:
            if any(needle in frame for needle in needles):
                if name == "server":
                    function = frame.split(" (", 1)[0]
                    return "server: response writing" if function in WRITE_FUNCTIONS else "server: parsing"
                return name
    python_frames = [f for f in frames if ".py:" in f]
    if not python_frames or python_frames[-1].startswith("Runner.run "):  # uvloop's C loop itself
        return "event loop and kernel"
    return "other python"


def profile(pid: int, duration: float, out: Path) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    # --gil: only the thread holding the GIL is sampled, so a thread waiting in a timed queue.get (the
    # SQLite driver's) is not counted as busy.
    cmd = [spy, "record", "--native", "--gil", "-r", "100", "-p", str(pid)]
    cmd += ["-d", f"{duration:g}"]
    return subprocess.Popen(
        [*cmd, "-f", "raw", "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def breakdown(raw: Path) -> tuple[Counter[str], Counter[str]]:
    """Samples per category, and the innermost frames of those no category claimed."""
    counts: Counter[str] = Counter()
    unclaimed: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit() and "epoll_wait" not in stack.rsplit(";", 1)[-1]:
            category = categorize(stack)  # an idle wait in epoll_wait costs no CPU
            counts[category] += int(count)
            if category == "other python":
                python = [f for f in stack.split(";") if ".py:" in f]
                unclaimed[python[-1] if python else stack[-80:]] += int(count)
    return counts, unclaimed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--log-level", default="info")
    parser.add_argument("--redis", default=None)
    parser.add_argument("--src", type=Path, default=None, help="run relay from this src/ (another build)")
    parser.add_argument("--keep", type=Path, default=None, help="keep py-spy's raw stacks in this directory")
    args = parser.parse_args()
    print(machine_line())
    body = json.dumps(CHAT_BODY, separators=(",", ":")).encode()
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-profile-") as tmpdir:
        tmp = Path(tmpdir)
        fake, upstream = start_fake_upstream(procs)
        extra = {"RELAY_REDIS_URL": args.redis} if args.redis else None
        src = {"src": args.src.resolve()} if args.src else {}
        relay = start_relay(procs, tmp, extra_env=extra, log_level=args.log_level, **src)
        key = configure(relay, upstream)
        url = relay.base_url + "/v1/chat/completions"
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        loads = [
            ("1 connection", lambda d: closed_loop(url, body, headers, 1, d)),
            ("16 connections", lambda d: closed_loop(url, body, headers, 16, d)),
            (f"paced {args.rate:g} req/s", lambda d: paced(url, body, headers, args.rate, d)),
        ]
        for name, load in loads:
            run_async(load(1.0))  # warm-up
            raw = tmp / f"{name.replace(' ', '_').replace('/', '')}.txt"
            spy = profile(relay.process.pid, args.duration, raw)
            time.sleep(0.5)  # py-spy attaches
            meter = CpuMeter({"relay": relay.process.pid, "upstream": fake.pid})
            meter.start()
            result = run_async(load(args.duration - 1.0))
            meter.stop()
            spy.wait()
            cpu_ms = meter.seconds["relay"] * 1000 / (result.requests or 1)
            counts, unclaimed = breakdown(raw)
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(raw, args.keep / raw.name)
            total = sum(counts.values()) or 1
            print(
                f"\n{name}: {result.rps:,.0f} req/s, relay CPU {cpu_ms:.3f} ms/req (py-spy attached; "
                f"others {meter.others_cores:.2f} cores), {total} busy samples"
            )
            for category, count in counts.most_common():
                share = count / total
                print(f"  {category:<26} {share * 100:5.1f} %  {share * cpu_ms * 1000:6.0f} µs/req")
            for frame, count in unclaimed.most_common(8):
                print(f"    other: {count / total * 100:4.1f} % {frame}")


if __name__ == "__main__":
    main()
