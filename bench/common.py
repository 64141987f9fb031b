"""Shared helpers of the benchmarks in ``bench/``: processes, CPU accounting, load generators, tables.

Nothing here asserts on numbers: a benchmark prints figures next to a baseline measured in the same
run. Every process a benchmark starts goes through :class:`Processes`, which starts it in its own
session (so its process group id is its pid) and stops the whole group at the end, even on Ctrl-C or
an error. Nothing else is ever signalled.

Load generators:

- :func:`run_wrk` — ``wrk`` (a C load generator, 1 thread by default) with a Lua script that POSTs a
  fixed body with fixed headers; optional think time per connection (``delay()``).
- :func:`closed_loop` — N asyncio workers on aiohttp, each sending its next request as soon as the
  previous answer is read. Used when ``wrk`` is not installed; it needs ≈ 0.2 ms of CPU per request
  itself and shares the machine's cores with what it measures, so its figures are a lower bound.
- :func:`paced` — an open-loop generator that starts requests at a fixed rate whatever the answers do
  (what ``wrk2 -R`` would do; wrk2 is not packaged for this machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
CLK_TCK = os.sysconf("SC_CLK_TCK")

CHAT_BODY: dict[str, Any] = {
    "model": "bench-model",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "Say hello to the benchmark"}],
}


# ------------------------------------------------------------------------------------------ processes


class Processes:
    """Starts processes in their own session and stops each one's process group, newest first.

    Use as a context manager; SIGTERM to the benchmark is turned into ``SystemExit`` so the cleanup
    runs then too (Ctrl-C raises ``KeyboardInterrupt``, which it handles already).
    """

    def __init__(self) -> None:
        self._started: list[subprocess.Popen[Any]] = []

    def __enter__(self) -> Processes:
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        process = subprocess.Popen(list(cmd), start_new_session=True, **kwargs)
        self._started.append(process)
        return process

    def stop(self, process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
        stop_group(process, timeout)
        if process in self._started:
            self._started.remove(process)

    def stop_all(self) -> None:
        while self._started:
            self.stop(self._started[-1])


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def stop_group(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM to the process group this module started (pgid == pid), SIGKILL after ``timeout``."""
    pgid = process.pid
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        process.wait(timeout=5)
    # Children of the leader that outlived it (none expected) are in the same group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def start_fake_upstream(
    procs: Processes, *extra_args: str, python: str = sys.executable
) -> tuple[subprocess.Popen[str], str]:
    """``python -m relay.fake_upstream --port 0 …`` on 127.0.0.1; returns the process and base URL."""
    cmd = [python, "-m", "relay.fake_upstream", "--host", "127.0.0.1", "--port", "0", *extra_args]
    return start_announcing(procs, cmd, "fake-upstream")


def start_announcing(procs: Processes, cmd: Sequence[str], name: str) -> tuple[subprocess.Popen[str], str]:
    """Start a server that prints ``<name> listening on <url>`` once it accepts connections (within
    20 s); returns the process and that URL. ``src/`` is on its ``PYTHONPATH``."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    process = procs.start(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 20)
    line = process.stdout.readline() if ready else ""
    if not line.startswith(f"{name} listening on "):
        procs.stop(process)
        raise SystemExit(f"{name} did not start: {line!r}")
    return process, line.rsplit(" ", 1)[-1].strip()


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 (for servers that cannot bind port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------------- CPU accounting


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process from /proc/<pid>/stat (zeros without /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (0 where /proc is unavailable)."""
    return sum(cpu_times(pid))


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs from /proc/stat; busy excludes idle and iowait."""
    try:
        parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 0
    total = sum(parts[:8])  # guest time is already counted in user/nice
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return total - idle, total


def own_cpu_seconds() -> float:
    """CPU of this process plus its waited-for children (wrk runs as one): the load generator's share."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


@dataclass
class CpuMeter:
    """CPU time between :meth:`start` and :meth:`stop`: of some processes, of the load generator (this
    process and its finished children), and of the whole machine; what the machine spent beyond those
    is ``others_cores`` (other people's work on a shared box: a run with a high figure is not clean).
    """

    pids: Mapping[str, int]
    before: dict[str, tuple[float, float]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    system_seconds: dict[str, float] = field(default_factory=dict)
    generator_seconds: float = 0.0
    busy_pct: float = 0.0
    others_cores: float = 0.0
    _machine: tuple[int, int] = (0, 0)
    _own: float = 0.0
    _wall: float = 0.0

    def start(self) -> None:
        self.before = {name: cpu_times(pid) for name, pid in self.pids.items()}
        self._own = own_cpu_seconds()
        self._wall = time.perf_counter()
        self._machine = machine_ticks()

    def stop(self) -> None:
        busy, total = machine_ticks()
        wall = time.perf_counter() - self._wall
        self.generator_seconds = own_cpu_seconds() - self._own
        for name, pid in self.pids.items():
            user, system = cpu_times(pid)
            self.seconds[name] = user + system - sum(self.before[name])
            self.system_seconds[name] = system - self.before[name][1]
        d_total = total - self._machine[1]
        self.busy_pct = 100.0 * (busy - self._machine[0]) / d_total if d_total > 0 else 0.0
        busy_seconds = (busy - self._machine[0]) / CLK_TCK
        ours = sum(self.seconds.values()) + self.generator_seconds
        self.others_cores = max(0.0, busy_seconds - ours) / wall if wall > 0 else 0.0


# ------------------------------------------------------------------------------------------- machine


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_line() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return (
        f"machine: {os.cpu_count()} CPU(s) ({cpu_model()}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )


def wrk_version(wrk: str) -> str:
    try:
        out = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "wrk"
    first = (out.stdout or out.stderr).splitlines()
    return " ".join(first[0].split()[:2]) if first else "wrk"


def find_wrk(choice: str) -> str | None:
    """``choice`` is auto | wrk | python; returns the wrk path, or None for the Python generator."""
    wrk = shutil.which("wrk") if choice in ("auto", "wrk") else None
    if choice == "wrk" and wrk is None:
        raise SystemExit("wrk not found (apt-get install -y wrk), or use --generator python")
    return wrk


# ---------------------------------------------------------------------------------------- load results


@dataclass
class LoadResult:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of an ascending list; 0 for an empty one."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), int(-(-p * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def from_latencies(latencies_s: list[float], seconds: float, errors: int, **extra: Any) -> LoadResult:
    latencies_s.sort()
    return LoadResult(
        len(latencies_s),
        seconds,
        percentile(latencies_s, 50) * 1000,
        percentile(latencies_s, 99) * 1000,
        errors,
        extra,
    )


# ------------------------------------------------------------------------------------------------- wrk

_WRK_SCRIPT = """-- generated by bench/common.py: POST a fixed body with fixed headers
wrk.method = "POST"
wrk.body = [==[%(body)s]==]
%(headers)s
%(delay)s
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK_JSON {"requests":%%d,"duration_s":%%.3f,"p50_ms":%%.3f,"p99_ms":%%.3f,' ..
    '"max_ms":%%.3f,"errors":%%d,"non2xx":%%d}\\n', summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    e.connect + e.read + e.write + e.timeout, e.status))
end
"""


def write_wrk_script(
    path: Path, body: bytes, headers: Mapping[str, str], delay_ms: float | None = None
) -> Path:
    """A Lua script for wrk: POST ``body`` with ``headers``; ``delay_ms`` of think time per request."""
    lines = [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    delay = f"function delay() return {delay_ms:.3f} end" if delay_ms else ""
    path.write_text(
        _WRK_SCRIPT % {"body": body.decode(), "headers": "\n".join(lines), "delay": delay}, encoding="utf-8"
    )
    return path


def run_wrk(
    wrk: str, url: str, script: Path, connections: int, duration: float, threads: int = 1
) -> LoadResult:
    threads = max(1, min(threads, connections))
    cmd = [
        wrk,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30, check=True).stdout
    line = next((x for x in out.splitlines() if x.startswith("WRK_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result line:\n{out}")
    data = json.loads(line.removeprefix("WRK_JSON "))
    return LoadResult(
        data["requests"],
        data["duration_s"],
        data["p50_ms"],
        data["p99_ms"],
        data["errors"] + data["non2xx"],
        {"max_ms": data["max_ms"]},
    )


# -------------------------------------------------------------------------------- asyncio generators


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (it comes with uvicorn[standard]): the generator should cost little."""
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


def run_async(coro: Any) -> Any:
    loop = new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


REQUEST_TIMEOUT_S = 10.0  # like wrk's --timeout


def _reason(exc: BaseException | None, status: int = 0) -> str:
    return f"HTTP {status}" if exc is None else type(exc).__name__


def _error_extra(reasons: Counter[str]) -> dict[str, Any]:
    return {"error_kinds": ", ".join(f"{k} ×{n}" for k, n in reasons.most_common())} if reasons else {}


async def closed_loop(
    url: str, body: bytes, headers: Mapping[str, str], concurrency: int, duration: float
) -> LoadResult:
    """``concurrency`` workers, each POSTing again as soon as the previous answer is fully read."""
    import aiohttp

    latencies: list[float] = []
    reasons: Counter[str] = Counter()
    deadline = time.perf_counter() + duration
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def worker(session: aiohttp.ClientSession) -> None:
        while (start := time.perf_counter()) < deadline:
            try:
                async with session.post(url, data=body, headers=dict(headers)) as response:
                    await response.read()
                    reason = None if response.status == 200 else _reason(None, response.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = _reason(exc)
            if reason is None:
                latencies.append(time.perf_counter() - start)
            else:
                reasons[reason] += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)
    ) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return from_latencies(latencies, elapsed, sum(reasons.values()), **_error_extra(reasons))


async def paced(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    rate: float,
    duration: float,
    max_in_flight: int = 256,
) -> LoadResult:
    """Open loop: request i is due at ``t0 + i / rate`` whether or not earlier ones have answered.

    Latency is measured from the scheduled start, so a generator (or server) that falls behind shows
    up in the figures instead of silently lowering the rate (no coordinated omission). ``extra`` holds
    how late the generator started requests (``lag_p99_ms``, ``lag_max_ms``): when that is not far
    below the latencies, the generator, not the target, is what was measured. At most
    ``max_in_flight`` requests are open at once (an overloaded target would otherwise be flooded with
    new connections); beyond that new requests wait, and their wait counts in their latency.
    """
    import aiohttp

    loop = asyncio.get_running_loop()
    clock = time.perf_counter  # uvloop's loop.time() only has millisecond resolution
    interval = 1.0 / rate
    count = int(rate * duration)
    latencies: list[float] = []
    lags: list[float] = []
    reasons: Counter[str] = Counter()
    in_flight: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)

    async def one(session: aiohttp.ClientSession, scheduled: float) -> None:
        lags.append(clock() - scheduled)
        try:
            async with session.post(url, data=body, headers=dict(headers)) as response:
                await response.read()
                reason = None if response.status == 200 else _reason(None, response.status)
        except (aiohttp.ClientError, TimeoutError) as exc:
            reason = _reason(exc)
        if reason is None:
            latencies.append(clock() - scheduled)
        else:
            reasons[reason] += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)
    ) as session:
        t0 = clock() + 0.01
        for i in range(count):
            scheduled = t0 + i * interval
            delay = scheduled - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            while len(in_flight) >= max_in_flight:
                await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            task = loop.create_task(one(session, scheduled))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        if in_flight:
            await asyncio.wait(in_flight)
        elapsed = clock() - t0
    lags.sort()
    return from_latencies(
        latencies,
        elapsed,
        sum(reasons.values()),
        lag_p99_ms=percentile(lags, 99) * 1000,
        lag_max_ms=(lags[-1] * 1000 if lags else 0.0),
        **_error_extra(reasons),
    )


# ------------------------------------------------------------------------------------------- printing


def ms(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f} ms"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> str:
    out = ["| " + " | ".join(headers) + " |"]
    out.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
    out.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(out)


def proc_status_mib(pid: int, key: str) -> float:
    """A ``/proc/<pid>/status`` memory line (``VmHWM``, ``VmRSS``) in MiB; 0 without /proc."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
