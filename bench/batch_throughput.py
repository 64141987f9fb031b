"""How fast are batches? SPEC §13: a 50 000-item submit (≈ 50 MB) answered in < 10 s with peak RSS
< 1 GiB; with a 0-latency fake upstream ≥ 500 items/s per replica; with latency L and W workers,
throughput ≥ 90 % of W/L.

Starts the fake upstream (``python -m relay.fake_upstream --port 0``) and, per phase, a fresh
``relay serve`` (one process, embedded SQLite in a temporary directory; ``--postgres URL`` runs it on a
fresh Postgres database created through that admin URL and dropped at the end), applies the catalog of
``live_overhead.py`` (one host → the fake, model ``bench-model``, policy ``*``) and mints a relay key.
Every item is a ≈ 1 KB chat request (``--item-bytes``) whose text differs per item.

1. **Submit** (relay started with ``RELAY_BATCH_WORKERS=0``, so nothing runs while it is measured): POST
   a ``--submit-items`` (50 000) item body to ``/v1/batches``; wall time from the first byte sent to the
   202, and the relay process's peak RSS (``VmHWM`` in ``/proc/<pid>/status``; a fresh process per run,
   so the peak is this submit's). Baselines, same body, same run: the upload to a trivial uvicorn app
   that reads the whole body and answers 202 (its own peak RSS too), and ``orjson.loads`` of the body
   in this process.
2. **Throughput at 0 ms** (``RELAY_BATCH_WORKERS=16``, ``--workers0``): a ``--items`` (5 000) item batch.
   items/s = completed items / (first item's start → last item's end), both from the batch's usage
   events (every item has one: ``ts`` is when it finished running, ``latency_ms`` how long it ran),
   read through ``GET /api/usage/events?batch_id=…`` once the batch is finished; the status view is
   polled once a second only to see the end. A batch still running after ``--max-seconds`` (20) is
   cancelled and its rate counts the items that ran, so a slow build cannot make the run endless.
   Baselines, same run, same concurrency, same bodies, same number of requests: POSTed straight to the
   fake upstream, and through Relay's live ``/v1/chat/completions`` (an asyncio/aiohttp closed loop in
   this process, which costs CPU on the same cores; the batch path needs no client at all).
3. **Throughput at ``--latency-ms`` (200)**, the fake's latency set with ``POST /__config``, one relay per
   W in ``--workers`` (16, 64): ``W × --waves`` (25) items, so the ideal makespan is exactly waves × L
   and the W/L bound is exact; items/s as in 2 and its share of W/L. Baseline: the live endpoint at
   concurrency W, same number of requests.

Every phase runs once per ``--payload-store`` (default ``files,database``: ``RELAY_BATCH_PAYLOAD_STORE``
of the relays started, SPEC §10.7), the two rows side by side in the table (``phase · store``).
Each measurement runs ``--runs`` times (default 2, interleaved with its baselines); the table shows the
median (min–max) and PASS/MISS against SPEC §13. ``others`` = CPU the machine spent on processes outside
the benchmark during the runs (a high figure marks a disturbed run). A benchmark, not a test: it always
exits 0 once it has measured. About 5 minutes with the defaults (both stores).

    .venv/bin/python bench/batch_throughput.py [--runs 2] [--submit-items 50000] [--items 5000]
        [--workers0 16] [--latency-ms 200] [--workers 16,64] [--waves 25] [--max-seconds 20]
        [--item-bytes 1024] [--phases submit,zero,latency] [--payload-store files,database]
        [--postgres postgresql://postgres@127.0.0.1:5432/postgres]
        [--apis native,openai,anthropic] [--webhook-items 200]

Not run by default: the phases ``upload`` (§14: a 50 000-line file uploaded and its batch created),
``apis`` (items/s through §14 and §15 next to the native API in the same run) and ``webhook`` (a
completion webhook's latency after a batch's last item), described in ``batch_apis.py``, e.g.
``--phases upload,apis,webhook --payload-store files``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CpuMeter,
    Processes,
    cpu_seconds,
    free_port,
    machine_line,
    markdown_table,
    new_event_loop,
    proc_status_mib,
    start_fake_upstream,
)
from live_overhead import UPSTREAM_KEY, Relay, configure, relay_admin
from live_overhead import start_relay as launch_relay

MODEL = "bench-model"
TARGET_SUBMIT_S = 10.0
TARGET_RSS_MIB = 1024.0
TARGET_ITEMS_PER_S = 500.0
TARGET_BOUND_SHARE = 0.90
POLL_S = 1.0

# A trivial ASGI app: reads the whole body (kept, like Relay keeps it) and answers 202 with its size.
SINK_CODE = r"""
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(parts)
    out = b'{"bytes": %d}' % len(body)
    await send({"type": "http.response.start", "status": 202,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(out))]})
    await send({"type": "http.response.body", "body": out})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False,
            http="httptools", loop="uvloop", lifespan="off")
"""


# ------------------------------------------------------------------------------------------ bodies


def item_body(idx: int, size: int) -> dict[str, Any]:
    """A chat request of about ``size`` bytes serialized; its text differs per item."""
    head = f"Item {idx}: summarise the following notes in one line."
    filler_words = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    words = [head]
    length = len(head)
    i = idx
    budget = max(0, size - 110)  # the JSON around the text
    while length < budget:
        word = filler_words[i % len(filler_words)]
        words.append(word)
        length += len(word) + 1
        i += 1
    return {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": " ".join(words)}]}


def batch_body(n: int, size: int) -> bytes:
    return orjson.dumps({"shape": "openai", "requests": [item_body(i, size) for i in range(n)]})


# ------------------------------------------------------------------------------------------ databases


class Databases:
    """Fresh databases, one per relay process: SQLite files, or Postgres databases (``--postgres``)."""

    def __init__(self, admin_url: str | None, tmp: Path) -> None:
        self.admin_url = admin_url
        self.tmp = tmp
        self.created: list[str] = []

    @property
    def kind(self) -> str:
        return "Postgres" if self.admin_url else "embedded SQLite"

    def fresh(self, workdir: Path) -> str:
        if self.admin_url is None:
            return f"sqlite:///{workdir / 'relay.db'}"
        name = f"relay_bench_{uuid.uuid4().hex[:12]}"
        _pg_admin(self.admin_url, f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return _with_database(self.admin_url, name)

    def drop_all(self) -> None:
        assert self.admin_url is not None or not self.created
        while self.created:
            name = self.created.pop()
            try:
                _pg_admin(self.admin_url or "", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except Exception as exc:  # report, keep cleaning up
                print(f"could not drop database {name}: {exc!r}", file=sys.stderr)


def _with_database(url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(database=name).render_as_string(hide_password=False)


def _pg_admin(url: str, statement: str) -> None:
    import asyncpg
    from sqlalchemy.engine import make_url

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


# ------------------------------------------------------------------------------------------ processes


def start_relay(procs: Processes, workdir: Path, database_url: str, workers: int, store: str) -> Relay:
    """``relay serve`` (one process) on ``database_url`` with ``RELAY_BATCH_WORKERS=workers`` and
    ``RELAY_BATCH_PAYLOAD_STORE=store``."""
    env = {"RELAY_BATCH_WORKERS": str(workers), "RELAY_BATCH_PAYLOAD_STORE": store}
    return launch_relay(procs, workdir, database_url=database_url, extra_env=env)


def start_sink(procs: Processes) -> tuple[subprocess.Popen[Any], str]:
    port = free_port()
    process = procs.start(
        [sys.executable, "-c", SINK_CODE, str(port)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process, f"http://127.0.0.1:{port}/sink"
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the sink server did not start") from None
            time.sleep(0.05)


# ------------------------------------------------------------------------------------------ results


@dataclass
class Series:
    """One measured figure over the runs: values, plus notes (e.g. others' CPU) per run."""

    values: list[float] = field(default_factory=list)
    others: list[float] = field(default_factory=list)

    def add(self, value: float, others: float | None = None) -> None:
        self.values.append(value)
        if others is not None:
            self.others.append(others)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def fmt(self, spec: str = ",.0f", unit: str = "") -> str:
        if not self.values:
            return "–"
        med = f"{self.median:{spec}}{unit}"
        if len(self.values) == 1:
            return med
        return f"{med} ({min(self.values):{spec}}–{max(self.values):{spec}})"

    def others_fmt(self) -> str:
        return "–" if not self.others else f"{max(self.others):.2f}"


@dataclass
class Row:
    phase: str
    what: str
    measured: str
    baseline: str
    target: str
    verdict: str
    others: str


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def rss_row(phase: str, hwm: Series, baseline: str) -> Row:
    """The SPEC §13 peak-RSS row of a submit-like phase (the relay's VmHWM against < 1 GiB)."""
    return Row(
        phase,
        "relay peak RSS (VmHWM)",
        hwm.fmt(",.0f", " MiB"),
        baseline,
        f"< {TARGET_RSS_MIB:,.0f} MiB",
        verdict(hwm.median < TARGET_RSS_MIB),
        "–",
    )


# ------------------------------------------------------------------------------------------ helpers


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def batch_events(relay: Relay, batch_id: str) -> list[dict[str, Any]]:
    """Every usage event of the batch, through the control API (newest first, page by page)."""
    events: list[dict[str, Any]] = []
    cursor: str | None = None
    with httpx.Client(timeout=60, headers=relay_admin(relay)) as client:
        while True:
            params = {"batch_id": batch_id, "limit": "1000"}
            if cursor:
                params["cursor"] = cursor
            page = client.get(relay.control_url + "/api/usage/events", params=params)
            page.raise_for_status()
            data = page.json()
            events.extend(data["events"])
            cursor = data.get("next_cursor")
            if not cursor:
                return events


@dataclass
class BatchRun:
    items: int
    submit_s: float
    span_s: float  # first item's start → last completed item's end (usage events)
    from_202_s: float  # the 202 → CompletedAt (only when every item ran)
    completed: int
    failed: int
    cancelled: int  # not run: the batch was cancelled at --max-seconds
    relay_cpu_ms_per_item: float  # from the submit to the end (or to the cancel, over the items run by then)
    others: float
    p50_item_ms: float

    @property
    def rate(self) -> float:
        return self.completed / self.span_s if self.span_s > 0 else 0.0

    @property
    def rate_from_202(self) -> float | None:
        return self.items / self.from_202_s if self.from_202_s > 0 and not self.cancelled else None

    @property
    def ran(self) -> int:
        return self.completed + self.failed

    def note(self) -> str:
        """What happened besides the rate: the 202-to-finished rate, or where the run was cut short."""
        if self.cancelled:
            return f"stopped at --max-seconds: {self.ran:,} of {self.items:,} items ran, the rest cancelled"
        return f"{self.rate_from_202:,.1f}/s from the 202 to CompletedAt"


def run_batch(
    relay: Relay, key: str, body: bytes, n: int, pids: dict[str, int], max_seconds: float
) -> BatchRun:
    """Submit ``body`` (n items) and wait until the batch is finished, or cancel what has not run after
    ``max_seconds``; then read its usage events. Relay's CPU is counted from the submit to the end."""
    meter = CpuMeter(pids)
    with httpx.Client(timeout=120, headers=auth(key)) as client:
        meter.start()
        relay_cpu0 = cpu_seconds(pids["relay"])
        started = time.perf_counter()
        answer = client.post(relay.base_url + "/v1/batches", content=body)
        submit_s = time.perf_counter() - started
        accepted_wall = datetime.now().astimezone()
        if answer.status_code != 202:
            raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:300]}")
        batch_id = answer.json()["id"]
        url = f"{relay.base_url}/v1/batches/{batch_id}"
        deadline = time.monotonic() + max_seconds
        cut_short = False
        while True:
            time.sleep(POLL_S)
            status = client.get(url).json()
            if status["CompletedAt"] is not None:
                break
            if time.monotonic() > deadline and not cut_short:
                relay_cpu = cpu_seconds(pids["relay"]) - relay_cpu0  # the cancel's own work excluded
                ran_at_cut = sum(status["counts"].get(state, 0) for state in ("completed", "discarded"))
                client.post(url + "/cancel").raise_for_status()
                cut_short = True  # running items finish; CompletedAt follows
            elif time.monotonic() > deadline + 120:
                raise RuntimeError(f"batch not finished 120 s after its cancel: {status['counts']}")
        if not cut_short:
            relay_cpu, ran_at_cut = cpu_seconds(pids["relay"]) - relay_cpu0, n
        meter.stop()
    events = batch_events(relay, batch_id)
    ran = [e for e in events if e["error_kind"] != "cancelled"]
    done = [e for e in ran if e["error_kind"] is None and 200 <= (e["status"] or 0) < 300]
    ends = [parse_ts(e["ts"]) for e in done]
    starts = [end - timedelta(milliseconds=e["latency_ms"] or 0) for end, e in zip(ends, done, strict=True)]
    span = (max(ends) - min(starts)).total_seconds() if done else 0.0
    from_202 = (parse_ts(status["CompletedAt"]) - accepted_wall).total_seconds()
    latencies = sorted(e["latency_ms"] or 0 for e in ran)
    return BatchRun(
        items=n,
        submit_s=submit_s,
        span_s=span,
        from_202_s=from_202,
        completed=len(done),
        failed=len(ran) - len(done),
        cancelled=len(events) - len(ran),
        relay_cpu_ms_per_item=relay_cpu * 1000 / max(1, ran_at_cut),
        others=meter.others_cores,
        p50_item_ms=latencies[len(latencies) // 2] if latencies else 0.0,
    )


async def fixed_count(
    url: str, bodies: Sequence[bytes], headers: dict[str, str], concurrency: int
) -> tuple[float, int]:
    """POST every body once, ``concurrency`` at a time (closed loop); (seconds, errors)."""
    import aiohttp

    next_index = 0
    errors = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal next_index, errors
        while next_index < len(bodies):
            body = bodies[next_index]
            next_index += 1
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        errors += 1
            except (aiohttp.ClientError, TimeoutError):
                errors += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, skip_auto_headers=("User-Agent",)
    ) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        return time.perf_counter() - started, errors


@dataclass
class LoadRun:
    requests: int
    seconds: float
    errors: int
    others: float
    relay_cpu_s: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def run_load(
    url: str, bodies: Sequence[bytes], headers: dict[str, str], concurrency: int, pids: dict[str, int]
) -> LoadRun:
    meter = CpuMeter(pids)
    loop = new_event_loop()
    try:
        loop.run_until_complete(fixed_count(url, bodies[: max(concurrency, 50)], headers, concurrency))
        meter.start()
        seconds, errors = loop.run_until_complete(fixed_count(url, bodies, headers, concurrency))
        meter.stop()
    finally:
        loop.close()
    return LoadRun(len(bodies), seconds, errors, meter.others_cores, meter.seconds.get("relay", 0.0))


def set_latency(upstream: str, latency_ms: float) -> None:
    answer = httpx.post(upstream + "/__config", json={"latency_ms": latency_ms, "jitter_ms": 0}, timeout=10)
    answer.raise_for_status()


@contextmanager
def relay_process(
    procs: Processes, dbs: Databases, tmp: Path, label: str, workers: int, upstream: str
) -> Iterator[tuple[Relay, str]]:
    workdir = tmp / f"{label}-{uuid.uuid4().hex[:6]}"
    relay = start_relay(procs, workdir, dbs.fresh(workdir), workers, STORE[0])
    say(
        f"   (relay serve pid {relay.process.pid}, RELAY_BATCH_WORKERS={workers}, "
        f"RELAY_BATCH_PAYLOAD_STORE={STORE[0]})"
    )
    try:
        key = configure(relay, upstream)
        yield relay, key
    finally:
        if relay.process.poll() is not None:
            print(f"relay serve ({label}) died:\n{relay.log_tail()}", file=sys.stderr)
        procs.stop(relay.process, timeout=40)


STORE = ["files"]  # the payload store of the relays being started (main sets it per pass)


def say(line: str) -> None:
    print(line, flush=True)


# ------------------------------------------------------------------------------------------ phases


def phase_submit(
    args: argparse.Namespace, procs: Processes, dbs: Databases, tmp: Path, upstream: str, rows: list[Row]
) -> None:
    n = args.submit_items
    body = batch_body(n, args.item_bytes)
    mb = len(body) / 1e6
    say(f"\n1. submit: {n:,} items, {mb:.1f} MB body, relay with RELAY_BATCH_WORKERS=0 (fresh per run)")
    submit, hwm, idle_rss, cpu, sink_s, sink_hwm, parse_s = (Series() for _ in range(7))
    sink, sink_url = start_sink(procs)
    for run in range(args.runs):
        started = time.perf_counter()
        orjson.loads(body)
        parse_s.add(time.perf_counter() - started)
        with httpx.Client(timeout=120) as client:
            started = time.perf_counter()
            answer = client.post(sink_url, content=body, headers={"Content-Type": "application/json"})
            sink_s.add(time.perf_counter() - started)
            answer.raise_for_status()
        sink_hwm.add(proc_status_mib(sink.pid, "VmHWM"))
        with relay_process(procs, dbs, tmp, f"submit{run}", 0, upstream) as (relay, key):
            pid = relay.process.pid
            idle_rss.add(proc_status_mib(pid, "VmHWM"))
            meter = CpuMeter({"relay": pid})
            with httpx.Client(timeout=300, headers=auth(key)) as client:
                meter.start()
                started = time.perf_counter()
                answer = client.post(relay.base_url + "/v1/batches", content=body)
                elapsed = time.perf_counter() - started
                meter.stop()
                peak = proc_status_mib(pid, "VmHWM")
                if answer.status_code != 202 or answer.json().get("total_items") != n:
                    raise RuntimeError(f"submit answered {answer.status_code}: {answer.text[:300]}")
            submit.add(elapsed, meter.others_cores)
            hwm.add(peak)
            cpu.add(meter.seconds["relay"])
            say(
                f"   run {run + 1}: 202 after {elapsed:.2f} s (relay CPU {meter.seconds['relay']:.2f} s), "
                f"relay peak RSS {peak:.0f} MiB (after boot {idle_rss.values[-1]:.0f}); "
                f"sink upload {sink_s.values[-1]:.2f} s, peak RSS {sink_hwm.values[-1]:.0f} MiB; "
                f"orjson.loads {parse_s.values[-1]:.2f} s; other processes {meter.others_cores:.2f} cores"
            )
    procs.stop(sink)
    rows.append(
        Row(
            "submit",
            f"{n:,} items ({mb:.0f} MB): POST → 202",
            submit.fmt(".2f", " s") + f"; relay CPU {cpu.fmt('.2f', ' s')}",
            f"upload to a trivial app {sink_s.fmt('.2f', ' s')}; orjson.loads {parse_s.fmt('.2f', ' s')}",
            f"< {TARGET_SUBMIT_S:g} s",
            verdict(submit.median < TARGET_SUBMIT_S),
            submit.others_fmt(),
        )
    )
    baseline = f"relay after boot {idle_rss.fmt(',.0f', ' MiB')}; trivial app {sink_hwm.fmt(',.0f', ' MiB')}"
    rows.append(rss_row("submit", hwm, baseline))


def phase_zero(
    args: argparse.Namespace,
    procs: Processes,
    dbs: Databases,
    tmp: Path,
    upstream: str,
    fake_pid: int,
    rows: list[Row],
) -> None:
    n, workers = args.items, args.workers0
    say(f"\n2. throughput at 0 ms upstream latency: {n:,} items, RELAY_BATCH_WORKERS={workers}")
    set_latency(upstream, 0)
    items = [item_body(i, args.item_bytes) for i in range(n)]
    bodies = [orjson.dumps(item) for item in items]
    body = orjson.dumps({"shape": "openai", "requests": items})
    batch, direct, live, ran, cpu_item, cpu_live = (Series() for _ in range(6))
    with relay_process(procs, dbs, tmp, "zero", workers, upstream) as (relay, key):
        pids = {"relay": relay.process.pid, "upstream": fake_pid}
        for run in range(args.runs):
            d = run_load(upstream + "/v1/chat/completions", bodies, auth(UPSTREAM_KEY), workers, pids)
            direct.add(d.rate, d.others)
            lv = run_load(relay.base_url + "/v1/chat/completions", bodies, auth(key), workers, pids)
            live.add(lv.rate, lv.others)
            cpu_live.add(lv.relay_cpu_s * 1000 / n)
            b = run_batch(relay, key, body, n, pids, args.max_seconds)
            batch.add(b.rate, b.others)
            cpu_item.add(b.relay_cpu_ms_per_item)
            say(
                f"   run {run + 1}: batch {b.rate:,.0f} items/s (first start → last end {b.span_s:.2f} s; "
                f"{b.note()}; submit {b.submit_s:.2f} s), {b.completed:,} completed, {b.failed} failed, "
                f"relay CPU {cpu_item.values[-1]:.3f} ms/item, item p50 {b.p50_item_ms:.0f} ms, "
                f"others {b.others:.2f} cores | direct {d.rate:,.0f} req/s ({d.errors} errors) | "
                f"live via relay {lv.rate:,.0f} req/s ({lv.errors} errors, relay CPU "
                f"{lv.relay_cpu_s * 1000 / n:.3f} ms/req)"
            )
            ran.add(b.ran)
    rows.append(
        Row(
            "0 ms",
            f"{n:,} items, {workers} workers: items/s",
            batch.fmt(",.0f")
            + f"; relay CPU {cpu_item.fmt('.2f', ' ms')}/item"
            + (
                ""
                if min(ran.values, default=n) >= n
                else f" (cut at {args.max_seconds:g} s: {ran.fmt(',.0f')} ran)"
            ),
            f"live via relay, {workers} conns: {live.fmt(',.0f')} req/s, {cpu_live.fmt('.2f', ' ms')}/req; "
            f"direct to the fake: {direct.fmt(',.0f')} req/s",
            f"≥ {TARGET_ITEMS_PER_S:g} items/s",
            verdict(batch.median >= TARGET_ITEMS_PER_S),
            batch.others_fmt(),
        )
    )


def phase_latency(
    args: argparse.Namespace,
    procs: Processes,
    dbs: Databases,
    tmp: Path,
    upstream: str,
    fake_pid: int,
    rows: list[Row],
) -> None:
    latency_s = args.latency_ms / 1000
    set_latency(upstream, args.latency_ms)
    try:
        for workers in args.worker_levels:
            n = workers * args.waves
            bound = workers / latency_s
            say(
                f"\n3. throughput at {args.latency_ms:g} ms upstream latency: RELAY_BATCH_WORKERS={workers}, "
                f"{n:,} items ({args.waves} waves), bound W/L = {bound:,.0f} items/s"
            )
            items = [item_body(i, args.item_bytes) for i in range(n)]
            bodies = [orjson.dumps(item) for item in items]
            body = orjson.dumps({"shape": "openai", "requests": items})
            batch, share, live, ran = Series(), Series(), Series(), Series()
            with relay_process(procs, dbs, tmp, f"lat{workers}", workers, upstream) as (relay, key):
                pids = {"relay": relay.process.pid, "upstream": fake_pid}
                for run in range(args.runs):
                    lv = run_load(relay.base_url + "/v1/chat/completions", bodies, auth(key), workers, pids)
                    live.add(lv.rate, lv.others)
                    b = run_batch(relay, key, body, n, pids, args.max_seconds)
                    batch.add(b.rate, b.others)
                    share.add(100 * b.rate / bound)
                    ran.add(b.ran)
                    say(
                        f"   run {run + 1}: batch {b.rate:,.1f} items/s = {share.values[-1]:.1f} % of W/L "
                        f"(first start → last end {b.span_s:.2f} s, ideal {args.waves * latency_s:.2f} s; "
                        f"{b.note()}), {b.completed:,} completed, {b.failed} failed, "
                        f"item p50 {b.p50_item_ms:.0f} ms, others {b.others:.2f} cores | live via relay "
                        f"{lv.rate:,.1f} req/s ({lv.errors} errors)"
                    )
            rows.append(
                Row(
                    f"{args.latency_ms:g} ms",
                    f"{n:,} items, {workers} workers: items/s",
                    f"{batch.fmt(',.1f')} = {share.fmt('.1f', ' %')} of W/L"
                    + (
                        ""
                        if min(ran.values, default=n) >= n
                        else f" (cut at {args.max_seconds:g} s: {ran.fmt(',.0f')} ran)"
                    ),
                    f"W/L = {bound:,.0f}/s; live via relay, {workers} conns: {live.fmt(',.1f')} req/s",
                    f"≥ {TARGET_BOUND_SHARE * 100:.0f} % of W/L",
                    verdict(share.median >= TARGET_BOUND_SHARE * 100),
                    batch.others_fmt(),
                )
            )
    finally:
        set_latency(upstream, 0)


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2, help="runs of each measurement (median reported)")
    parser.add_argument("--submit-items", type=int, default=50_000, help="items of the submit phase")
    parser.add_argument("--item-bytes", type=int, default=1024, help="approximate size of one item")
    parser.add_argument("--items", type=int, default=5_000, help="items of the 0 ms throughput batch")
    parser.add_argument("--workers0", type=int, default=16, help="RELAY_BATCH_WORKERS of the 0 ms phase")
    parser.add_argument("--latency-ms", type=float, default=200.0, help="upstream latency of phase 3")
    parser.add_argument("--workers", default="16,64", help="RELAY_BATCH_WORKERS levels of phase 3")
    parser.add_argument("--waves", type=int, default=25, help="phase 3 items = workers × waves")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=20.0,
        help="a throughput batch still running after this is cancelled; its rate counts the items that ran",
    )
    parser.add_argument(
        "--phases",
        default="submit,zero,latency",
        help="which phases to run (submit, zero, latency; and upload, apis, webhook: see batch_apis.py)",
    )
    parser.add_argument(
        "--apis", default="native,openai,anthropic", help="batch APIs of the apis and webhook phases"
    )
    parser.add_argument("--webhook-items", type=int, default=200, help="items per batch of the webhook phase")
    parser.add_argument(
        "--payload-store",
        default="files,database",
        help="RELAY_BATCH_PAYLOAD_STORE values: each phase runs once per store, reported side by side",
    )
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="run relay on Postgres: an admin URL (e.g. postgresql://postgres@127.0.0.1:5432/postgres) "
        "through which a fresh database is created per relay process and dropped at the end",
    )
    args = parser.parse_args()
    args.worker_levels = [int(x) for x in args.workers.split(",") if x.strip()]
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    unknown = phases - {"submit", "zero", "latency", "upload", "apis", "webhook"}
    if unknown:
        parser.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    args.api_list = [x.strip() for x in args.apis.split(",") if x.strip()]
    if not args.api_list or set(args.api_list) - {"native", "openai", "anthropic"}:
        parser.error("--apis: a comma-separated list of native, openai, anthropic")
    stores = [x.strip() for x in args.payload_store.split(",") if x.strip()]
    if not stores or set(stores) - {"files", "database"}:
        parser.error("--payload-store: a comma-separated list of files, database")

    say(f"Relay batch throughput (SPEC §13) — {machine_line()}")
    rows: list[Row] = []
    started = time.monotonic()
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-bench-batch-") as tmpdir:
        tmp = Path(tmpdir)
        dbs = Databases(args.postgres, tmp)
        say(f"relay serve: one process per phase, {dbs.kind}, log level warning; {args.runs} run(s) each")
        try:
            fake, upstream = start_fake_upstream(procs)
            sys.modules.setdefault("batch_throughput", sys.modules[__name__])  # one STORE for both
            import batch_apis as apis

            steps: list[tuple[str, Callable[[], None]]] = [
                ("submit", lambda: phase_submit(args, procs, dbs, tmp, upstream, rows)),
                ("zero", lambda: phase_zero(args, procs, dbs, tmp, upstream, fake.pid, rows)),
                ("latency", lambda: phase_latency(args, procs, dbs, tmp, upstream, fake.pid, rows)),
                ("upload", lambda: apis.phase_upload(args, procs, dbs, tmp, upstream, rows)),
                ("apis", lambda: apis.phase_apis(args, procs, dbs, tmp, upstream, fake.pid, rows)),
                ("webhook", lambda: apis.phase_webhook(args, procs, dbs, tmp, upstream, rows)),
            ]
            for name, step in steps:
                if name not in phases:
                    continue
                for store in stores:  # one store after the other, so their rows sit side by side
                    STORE[0] = store
                    say(f"\n== phase {name}, RELAY_BATCH_PAYLOAD_STORE={store}")
                    first = len(rows)
                    try:
                        step()
                    except (RuntimeError, OSError, httpx.HTTPError) as exc:
                        print(f"phase {name} failed, reporting what was measured: {exc!r}", file=sys.stderr)
                    for row in rows[first:]:
                        row.phase = f"{row.phase} · {store}"
        finally:
            procs.stop_all()
            dbs.drop_all()

    print()
    say(f"Relay batch throughput — {machine_line()}")
    say(
        f"relay serve: one process, {dbs.kind}; fake upstream, relay and the client share "
        f"{os.cpu_count()} CPU(s); {args.runs} run(s) per figure: median (min–max); "
        f"{time.monotonic() - started:.0f} s in all"
    )
    say(
        "items/s = completed items / (first item's start → last item's end), from the usage events; "
        "others = max CPU (cores) other processes used during a run"
    )
    print()
    print(
        markdown_table(
            ["phase", "measure", "measured", "baseline (same run)", "target", "", "others"],
            [[r.phase, r.what, r.measured, r.baseline, r.target, r.verdict, r.others] for r in rows],
            [False, False, True, False, False, False, True],
        )
    )
    print("(a benchmark, not a test: nothing here fails the build; SPEC §13 targets judged on the medians)")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: every process this benchmark started has been stopped", file=sys.stderr)
        sys.exit(130)
