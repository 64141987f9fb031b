"""What does Relay add to a live request? SPEC §13: added latency vs calling the fake upstream directly,
same load, same run — p50 < 1 ms and p99 < 5 ms at 500 req/s on one process; gateway CPU ≤ 1 ms per
proxied request.

Starts the fake upstream (``python -m relay.fake_upstream --port 0``) and one ``relay serve`` (embedded
SQLite in a temporary directory, log level ``--log-level`` (default ``info``, the shipped default: one
JSON line per request, into a file), no Redis unless ``--redis``, no batch workers),
applies a minimal catalog (one host → the fake upstream, model ``bench-model`` with an ``openai``
binding, policy ``*`` with one host key, team/project/service account) and mints a relay key. Then,
with the same small chat body and the same load generator, interleaved level by level:

1. closed loop at each concurrency (default 1, 16, 64): **direct** = POST the fake upstream's
   ``/v1/chat/completions`` with an upstream key; **floor** = the same through ``bench/floor_proxy.py``,
   the thinnest proxy on Relay's stack (uvicorn + uvloop + httptools, Relay's client; parse, rewrite
   ``model``, forward; nothing else), so the table separates what the extra process hop costs on this
   machine from what Relay's own work costs (``--no-floor`` skips it); **relay** = POST Relay's
   ``/v1/chat/completions`` with the relay key; **translated** = the same body for ``bench-claude``, a
   model bound with the ``anthropic`` adapter on the same fake upstream, so Relay translates the request
   to ``/v1/messages`` and the answer (or stream) back (SPEC §7.3: ≤ 0.3 ms extra CPU per small
   non-streamed request, reported against **relay** from the same run, with the added p50/p99).
   Each run: 1 s warm-up (not recorded), then
   ``--duration`` seconds measured.
2. the same at ``stream: true`` (default concurrency 16); latency = until the last byte of the stream.
3. fixed rate (default 500 req/s), the SPEC's load: an open-loop asyncio generator that starts a
   request every 2 ms whatever the answers do, latency measured from each request's scheduled start;
   and, when wrk is installed, wrk with 8 connections and 8 s/rate of think time per request (a
   closed loop a little under the rate: ≈ 460 req/s direct; wrk2's ``-R`` is not available).
   ``--rate 500,250`` adds more rates; the SPEC's targets are judged at the first.

Relay's CPU time (utime + stime from /proc; the floor proxy's too) is read around every measured run
→ CPU ms per proxied request (Relay's background tasks included); so is the CPU the machine spent on
processes outside the benchmark (``others``: on a shared machine, a run with a high figure is
disturbed). Prints the tables, the machine, and PASS/MISS next to each SPEC §13 target. A benchmark,
not a test: it always exits 0 once it has measured.

    .venv/bin/python bench/live_overhead.py [--duration 5] [--concurrency 1,16,64] [--rate 500]
                                            [--generator auto|wrk|python] [--redis URL]
                                            [--log-level info|warning] [--no-floor]
                                            [--otel] [--base-src DIR] [--src DIR] [--rounds N]

``--otel`` (issue 29) adds **traced**: a second ``relay serve`` with tracing on (``RELAY_OTEL_ENDPOINT``
= ``bench/otlp_sink.py``, a local sink that answers every export; ratio 1.0: every request a server
span and an attempt span), run beside **relay** (tracing off) in every round; ``--base-src DIR`` adds
**base**, a relay from another source tree (a worktree of the commit before tracing), for "off costs
nothing". The summary prints each one's CPU ms/req and p50/p99 side by side with the differences.

``--base-src DIR`` alone runs **base** right before **relay** at every load of every round, so two
builds meet the machine at the same moment (on a shared VM its speed drifts by ±30 % within minutes,
more than most changes move), and prints each pair's difference and each load's median of them.

Load generator: ``wrk`` (1 thread) when installed, else an asyncio/aiohttp generator, which costs
0.3–0.7 ms CPU per request itself and competes for the same cores as Relay and the fake upstream (the
output says which one ran). Everything listens on 127.0.0.1; every process is stopped by process group
at the end, also on Ctrl-C or an error.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cache_mode import CACHE_POLICY, cache_catalog, cache_lines, cache_runs
from common import (
    CHAT_BODY,
    SRC,
    CpuMeter,
    LoadResult,
    Processes,
    closed_loop,
    find_wrk,
    free_port,
    machine_line,
    markdown_table,
    ms,
    paced,
    proc_status_mib,
    run_async,
    run_wrk,
    start_announcing,
    start_fake_upstream,
    write_wrk_script,
    wrk_version,
)
from guard_mode import (
    GUARD_POLICY,
    STREAM_GUARD_POLICY,
    TWO_GUARD_POLICY,
    guard_catalog,
    guard_lines,
    guard_runs,
)

UPSTREAM_KEY = "sk-bench-upstream"
MODEL = "bench-model"
TRANSLATED_MODEL = "bench-claude"  # bound with the anthropic adapter: chat requests to it are translated
WRK_PACED_CONNECTIONS = 8
TARGET_P50_MS = 1.0
TARGET_P99_MS = 5.0
TARGET_CPU_MS = 1.0
TARGET_RPS = 1000.0
TARGET_TRANSLATE_CPU_MS = 0.3  # SPEC §7.3: extra CPU of a translated small non-streamed request


# ------------------------------------------------------------------------------------------ Relay


@dataclass
class Relay:
    process: subprocess.Popen[Any]
    base_url: str
    control_url: str
    admin_token: str
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def relay_command() -> list[str]:
    """``relay serve`` (which runs on uvloop, see ``relay.cli.main``)."""
    script = Path(sys.executable).parent / "relay"
    if script.exists():
        return [str(script), "serve"]
    return [sys.executable, "-c", "from relay.cli.main import main; main()", "serve"]


def start_relay(
    procs: Processes,
    workdir: Path,
    *,
    database_url: str | None = None,
    extra_env: dict[str, str] | None = None,
    log_level: str = "warning",
    src: Path = SRC,
) -> Relay:
    """``relay serve`` (one process, ``log_level``, JSON logs, no Redis, no batch workers unless
    ``extra_env`` says otherwise) on ``database_url`` (default: a SQLite file in ``workdir``); returns
    once both planes answer."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, control_port = free_port(), free_port()
    while control_port == port:
        control_port = free_port()
    # the caller may name the token (replicas of one deployment share it)
    admin_token = (extra_env or {}).get("RELAY_ADMIN_TOKEN") or "bench-admin-" + secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}  # no Redis, no stray config
    env.update(
        PYTHONPATH=str(src),
        RELAY_BIND="127.0.0.1",
        RELAY_PORT=str(port),
        RELAY_CONTROL_PORT=str(control_port),
        RELAY_DATABASE_URL=database_url or f"sqlite:///{workdir / 'relay.db'}",
        RELAY_DATA_DIR=str(workdir / "relay-data"),
        RELAY_BATCH_PAYLOAD_DIR=str(workdir / "relay-batch-payloads"),
        RELAY_ADMIN_TOKEN=admin_token,
        RELAY_MASTER_KEY=base64.b64encode(secrets.token_bytes(32)).decode(),
        RELAY_LOG_LEVEL=log_level,
        RELAY_LOG_FORMAT="json",
    )
    if "batch_workers" in (src / "relay" / "config.py").read_text(encoding="utf-8"):
        env["RELAY_BATCH_WORKERS"] = "0"
    env.update(extra_env or {})
    log_path = workdir / "relay.log"
    with log_path.open("wb") as log:
        process = procs.start(
            relay_command(),
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    relay = Relay(
        process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{control_port}", admin_token, log_path
    )
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=2) as client:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"relay serve exited with {process.returncode}:\n{relay.log_tail()}")
            try:
                if (
                    client.get(relay.base_url + "/livez").status_code == 200
                    and client.get(
                        relay.control_url + "/api/snapshot", headers=relay_admin(relay)
                    ).status_code
                    == 200
                ):
                    return relay
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"relay serve did not become ready within 60 s:\n{relay.log_tail()}")
            time.sleep(0.1)


def start_floor_proxy(procs: Processes, upstream: str) -> tuple[subprocess.Popen[str], str]:
    """``bench/floor_proxy.py`` in front of ``upstream``; returns the process and its base URL."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve().parent / "floor_proxy.py"),
        "--upstream",
        upstream,
        "--upstream-key",
        UPSTREAM_KEY,
        "--model",
        MODEL,
    ]
    return start_announcing(procs, cmd, "floor-proxy")


PRICING = {"input": 0.15, "output": 0.6, "cached_input": 0.075}


def relay_admin(relay: Relay) -> dict[str, str]:
    return {"Authorization": f"Bearer {relay.admin_token}"}


def catalog(upstream_base: str) -> list[dict[str, Any]]:
    return [
        {"kind": "Team", "name": "bench"},
        {"kind": "Host", "name": "fake", "spec": {"base_url": upstream_base}},
        {"kind": "HostKey", "name": "fake-key", "spec": {"host": "fake", "value": UPSTREAM_KEY}},
        {"kind": "Model", "name": MODEL, "spec": {"provider": "openai"}},
        {
            "kind": "Binding",
            "name": "bench-model-fake",
            "spec": {"model": MODEL, "host": "fake", "adapter": "openai", "pricing": PRICING},
        },
        {"kind": "Model", "name": TRANSLATED_MODEL, "spec": {"provider": "anthropic"}},
        {
            "kind": "Binding",
            "name": "bench-claude-fake",
            "spec": {"model": TRANSLATED_MODEL, "host": "fake", "adapter": "anthropic", "pricing": PRICING},
        },
        {"kind": "Policy", "name": "bench", "spec": {"models": ["*"], "host_keys": ["fake-key"]}},
        {"kind": "Project", "name": "bench", "spec": {"team": "bench", "default_policy": "bench"}},
        {"kind": "ServiceAccount", "name": "bench-sa", "spec": {"project": "bench"}},
    ]


#: ``--budget``: the same catalog plus a model to fall back to and two more policies over the same key —
#: ``bench-tokens`` with a tokens rule (a reserve and a commit round trip per request, like any rule)
#: and ``bench-budget`` with the same rule plus a spend limit that never runs out and a fallback entry
#: for the benchmarked model (never taken: the upstream answers). budget vs tokens is what the spend
#: meter and the fallback entry add (issue 20: within 0.1 ms CPU per request).
BUDGET_POLICIES = {
    "bench-tokens": [{"meter": "tokens", "limit": 10**12, "window": "1d"}],
    "bench-budget": [
        {"meter": "tokens", "limit": 10**12, "window": "1d"},
        {"meter": "cost_usd", "limit": 1_000_000, "window": "30d"},
    ],
}


def budget_catalog() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [
        {"kind": "Model", "name": "bench-fallback", "spec": {"provider": "openai"}},
        {
            "kind": "Binding",
            "name": "bench-fallback-fake",
            "spec": {"model": "bench-fallback", "host": "fake", "adapter": "openai", "pricing": PRICING},
        },
    ]
    for name, rules in BUDGET_POLICIES.items():
        spec: dict[str, Any] = {"models": ["*"], "host_keys": ["fake-key"], "rate_limit": {"rules": rules}}
        if name == "bench-budget":
            spec["fallbacks"] = {MODEL: ["bench-fallback"]}
        docs.append({"kind": "Policy", "name": name, "spec": spec})
    return docs


def mint_key(relay: Relay, policy: str | None = None) -> str:
    body = {"principal_kind": "serviceaccount", "principal": "bench-sa"}
    if policy is not None:
        body["policy"] = policy
    with httpx.Client(timeout=10, headers=relay_admin(relay)) as client:
        minted = client.post(relay.control_url + "/api/keys", json=body)
    if minted.status_code not in (200, 201):
        raise SystemExit(f"POST /api/keys answered {minted.status_code}: {minted.text}")
    return str(minted.json()["plaintext"])


def configure(
    relay: Relay, upstream_base: str, *, budget: bool = False, cache: bool = False, guard: bool = False
) -> str:
    """Applies the catalog, mints a relay key, waits until a request through Relay answers 200."""
    documents = catalog(upstream_base) + (budget_catalog() if budget else [])
    documents += cache_catalog() if cache else []
    documents += guard_catalog() if guard else []
    with httpx.Client(timeout=10, headers=relay_admin(relay)) as client:
        applied = client.post(relay.control_url + "/api/apply", json={"documents": documents})
        if applied.status_code != 200:
            raise SystemExit(f"POST /api/apply answered {applied.status_code}: {applied.text}")
    key = mint_key(relay)
    deadline = time.monotonic() + 10
    with httpx.Client(timeout=10) as client:
        while True:
            answer = client.post(
                relay.base_url + "/v1/chat/completions",
                json=CHAT_BODY,
                headers={"Authorization": f"Bearer {key}"},
            )
            if answer.status_code == 200 and answer.json().get("choices"):
                return key
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"a chat completion through Relay answered {answer.status_code}: {answer.text[:500]}\n"
                    f"{relay.log_tail()}"
                )
            time.sleep(0.1)


def run_cache_mode(
    args: argparse.Namespace, relay: Relay, direct: Target, via: Target, pids: dict[str, int]
) -> list[str]:
    """``--cache``: the response cache's runs (bench/cache_mode.py), before the others; its summary."""
    runs = cache_runs(
        pids=pids,
        relay_url=via.url,
        upstream_url=direct.url,
        plain_headers=via.headers,
        cache_headers={"Authorization": f"Bearer {mint_key(relay, CACHE_POLICY)}"},
        upstream_headers=direct.headers,
        concurrency=args.cache_concurrency,
        rounds=args.cache_rounds,
        warmup=args.warmup,
        duration=args.duration,
    )
    return cache_lines(runs)


def run_guard_mode(args: argparse.Namespace, relay: Relay, via: Target, pids: dict[str, int]) -> list[str]:
    """``--guardrails``: input and stream output guardrails vs the plain policy (bench/guard_mode.py)."""
    runs = guard_runs(
        pids=pids,
        relay_url=via.url,
        plain_headers=dict(via.headers),
        guard_headers={"Authorization": f"Bearer {mint_key(relay, GUARD_POLICY)}"},
        two_guard_headers={"Authorization": f"Bearer {mint_key(relay, TWO_GUARD_POLICY)}"},
        stream_guard_headers={"Authorization": f"Bearer {mint_key(relay, STREAM_GUARD_POLICY)}"},
        concurrency=args.guard_concurrency,
        rounds=args.guard_rounds,
        warmup=args.warmup,
        duration=args.duration,
    )
    return guard_lines(runs)


def rss_mib(pid: int) -> float:
    return proc_status_mib(pid, "VmRSS")


# ------------------------------------------------------------------------------------------ runs


@dataclass
class Target:
    name: str  # direct | floor | relay | translated
    url: str
    headers: dict[str, str]
    model: str | None = None  # replaces the body's model (the translated target's anthropic-bound model)

    def body(self, body: bytes) -> bytes:
        if self.model is None:
            return body
        return json.dumps({**json.loads(body), "model": self.model}, separators=(",", ":")).encode()


@dataclass
class Row:
    load: str  # "closed", "stream", "paced", "wrk-think"
    target: str
    concurrency: str
    result: LoadResult
    proxy_cpu_ms: float | None
    proxy_sys_pct: float | None
    upstream_cpu_ms: float | None
    generator_cpu_ms: float
    others_cores: float


class Bench:
    def __init__(self, args: argparse.Namespace, wrk: str | None, tmp: Path, pids: dict[str, int]) -> None:
        self.args = args
        self.wrk = wrk
        self.tmp = tmp
        self.pids = pids
        self.rows: list[Row] = []
        self.round_label = ""  # " r2" … with --rounds: each round's closed-loop rows are their own
        self._scripts: dict[tuple[str, bool, float | None], Path] = {}

    def _script(self, target: Target, body: bytes, stream: bool, delay_ms: float | None) -> Path:
        key = (target.name, stream, delay_ms)
        if key not in self._scripts:
            headers = {"Content-Type": "application/json", **target.headers}
            name = f"{target.name}-{'stream' if stream else 'whole'}-{delay_ms or 0:g}.lua"
            self._scripts[key] = write_wrk_script(self.tmp / name, body, headers, delay_ms)
        return self._scripts[key]

    def _load(
        self,
        target: Target,
        body: bytes,
        stream: bool,
        concurrency: int,
        seconds: float,
        delay_ms: float | None,
    ) -> LoadResult:
        if self.wrk:
            script = self._script(target, body, stream, delay_ms)
            return run_wrk(self.wrk, target.url, script, concurrency, seconds, self.args.threads)
        headers = {"Content-Type": "application/json", **target.headers}
        result: LoadResult = run_async(closed_loop(target.url, body, headers, concurrency, seconds))
        return result

    def _measure(self, load: str, target: Target, label: str, run: Any) -> None:
        meter = CpuMeter(self.pids)
        meter.start()
        result: LoadResult = run()
        meter.stop()
        n = result.requests or 1
        proxy_cpu = proxy_sys = None
        if target.name in ("relay", "floor", "translated", "tokens", "budget", "traced", "base"):
            proxy = target.name if target.name in ("floor", "traced", "base") else "relay"  # under test
            proxy_cpu = meter.seconds[proxy] * 1000 / n
            proxy_sys = (
                100 * meter.system_seconds[proxy] / meter.seconds[proxy] if meter.seconds[proxy] else 0
            )
        upstream_cpu = meter.seconds["upstream"] * 1000 / n
        generator_cpu = meter.generator_seconds * 1000 / n
        self.rows.append(
            Row(
                load,
                target.name,
                label,
                result,
                proxy_cpu,
                proxy_sys,
                upstream_cpu,
                generator_cpu,
                meter.others_cores,
            )
        )
        extra = ""
        if "lag_p99_ms" in result.extra:
            extra = f", generator lag p99 {result.extra['lag_p99_ms']:.2f} ms"
        if "error_kinds" in result.extra:
            extra += f", errors: {result.extra['error_kinds']}"
        print(
            f"   {load:<9} {target.name:<6} {label:>8}: {result.rps:8,.0f} req/s  p50 {result.p50_ms:7.2f} ms"
            f"  p99 {result.p99_ms:7.2f} ms  errors {result.errors}"
            + (f"  {target.name} CPU {proxy_cpu:.3f} ms/req" if proxy_cpu is not None else "")
            + f"  generator CPU {generator_cpu:.3f} ms/req  other processes {meter.others_cores:.2f} cores"
            + extra,
            flush=True,
        )

    def closed(self, load: str, target: Target, body: bytes, stream: bool, concurrency: int) -> None:
        body = target.body(body)
        self._load(target, body, stream, concurrency, self.args.warmup, None)
        self._measure(
            load,
            target,
            str(concurrency) + self.round_label,
            lambda: self._load(target, body, stream, concurrency, self.args.duration, None),
        )

    def paced(self, target: Target, body: bytes, rate: float) -> None:
        body = target.body(body)
        headers = {"Content-Type": "application/json", **target.headers}
        run_async(paced(target.url, body, headers, rate, self.args.warmup))
        self._measure(
            "paced",
            target,
            f"{rate:g}/s",
            lambda: run_async(paced(target.url, body, headers, rate, self.args.duration)),
        )

    def wrk_think(self, target: Target, body: bytes, rate: float) -> None:
        body = target.body(body)
        delay_ms = WRK_PACED_CONNECTIONS * 1000.0 / rate
        self._load(target, body, False, WRK_PACED_CONNECTIONS, self.args.warmup, delay_ms)
        self._measure(
            "wrk-think",
            target,
            f"{rate:g}/s",
            lambda: self._load(target, body, False, WRK_PACED_CONNECTIONS, self.args.duration, delay_ms),
        )


# ------------------------------------------------------------------------------------------ report


def find(rows: list[Row], load: str, label: str, target: str) -> Row | None:
    return next((r for r in rows if r.load == load and r.concurrency == label and r.target == target), None)


def pair(rows: list[Row], load: str, label: str) -> tuple[Row | None, Row | None]:
    return find(rows, load, label, "direct"), find(rows, load, label, "relay")


def render_table(rows: list[Row]) -> str:
    out: list[list[str]] = []
    for r in rows:
        direct, _ = pair(rows, r.load, r.concurrency)
        added50 = added99 = "–"
        if r.target != "direct" and direct is not None:
            added50 = f"{r.result.p50_ms - direct.result.p50_ms:+.2f} ms"
            added99 = f"{r.result.p99_ms - direct.result.p99_ms:+.2f} ms"
        out.append(
            [
                r.load,
                r.target,
                r.concurrency,
                f"{r.result.rps:,.0f}",
                ms(r.result.p50_ms),
                ms(r.result.p99_ms),
                added50,
                added99,
                "–" if r.proxy_cpu_ms is None else f"{r.proxy_cpu_ms:.3f} ({r.proxy_sys_pct:.0f} % sys)",
                "–" if r.upstream_cpu_ms is None else f"{r.upstream_cpu_ms:.3f}",
                f"{r.others_cores:.2f}",
                str(r.result.errors),
            ]
        )
    headers = [
        "load",
        "target",
        "conc.",
        "req/s",
        "p50",
        "p99",
        "added p50",
        "added p99",
        "proxy CPU ms/req",
        "upstream CPU ms/req",
        "others (cores)",
        "errors",
    ]
    return markdown_table(headers, out, [False, False, True, *([True] * 9)])


def budget_lines(rows: list[Row]) -> list[str]:
    """Issue 20's target: a policy with a spend limit and a fallback entry costs within 0.1 ms CPU per
    request of the same policy without them (budget vs tokens, same load, same run)."""
    out = []
    for r in rows:
        if r.target != "budget" or r.proxy_cpu_ms is None:
            continue
        base = find(rows, r.load, r.concurrency, "tokens")
        plain = find(rows, r.load, r.concurrency, "relay")
        if base is None or base.proxy_cpu_ms is None:
            continue
        delta = r.proxy_cpu_ms - base.proxy_cpu_ms
        vs_plain = (
            f", {r.proxy_cpu_ms - plain.proxy_cpu_ms:+.3f} ms vs no rules"
            if plain and plain.proxy_cpu_ms
            else ""
        )
        out.append(
            f"budget + fallback entry vs the same policy without them ({r.load} {r.concurrency}): "
            f"{delta:+.3f} ms CPU/req{vs_plain} — {verdict(delta <= 0.1)} (target ≤ +0.1 ms)"
        )
    return out


TARGET_OTEL_OFF_CPU_MS = 0.02  # issue 29: tracing off costs nothing measurable vs the build before it
TARGET_OTEL_ON_CPU_MS = 0.15  # issue 29: tracing on (ratio 1.0, a local collector) per request


def otel_lines(rows: list[Row]) -> list[str]:
    """Issue 29's targets, per load and on average over the loads of this run: CPU per request of the
    build under test with tracing off (relay) and on (traced, ratio 1.0, spans exported to a local
    sink), and of the build before tracing (base, when ``--base-src`` ran it), with p50/p99 beside."""
    out = ["", "tracing (--otel): CPU ms/req and p50/p99 ms, same loads, same run, interleaved"]
    off_deltas: list[float] = []
    on_deltas: list[float] = []
    for r in rows:
        if r.target != "relay" or r.proxy_cpu_ms is None:
            continue
        on = find(rows, r.load, r.concurrency, "traced")
        base = find(rows, r.load, r.concurrency, "base")
        parts = [f"{r.load} {r.concurrency}:"]
        if base is not None and base.proxy_cpu_ms is not None:
            off_deltas.append(r.proxy_cpu_ms - base.proxy_cpu_ms)
            parts.append(
                f"base {base.proxy_cpu_ms:.3f} (p50 {base.result.p50_ms:.2f} p99 {base.result.p99_ms:.2f})"
            )
        parts.append(f"off {r.proxy_cpu_ms:.3f} (p50 {r.result.p50_ms:.2f} p99 {r.result.p99_ms:.2f})")
        if on is not None and on.proxy_cpu_ms is not None:
            on_deltas.append(on.proxy_cpu_ms - r.proxy_cpu_ms)
            parts.append(f"on {on.proxy_cpu_ms:.3f} (p50 {on.result.p50_ms:.2f} p99 {on.result.p99_ms:.2f})")
            parts.append(f"on - off {on.proxy_cpu_ms - r.proxy_cpu_ms:+.3f}")
        if base is not None and base.proxy_cpu_ms is not None:
            parts.append(f"off - base {r.proxy_cpu_ms - base.proxy_cpu_ms:+.3f}")
        out.append("  " + "  ".join(parts))
    # Judged on the median of the runs' differences: on a shared machine one disturbed run moves the
    # mean by more than the targets themselves; both are printed.
    if off_deltas:
        mean, median = sum(off_deltas) / len(off_deltas), statistics.median(off_deltas)
        out.append(
            f"tracing off vs the build before it: median {median:+.3f}, mean {mean:+.3f} ms CPU per request "
            f"over {len(off_deltas)} runs (target ≤ {TARGET_OTEL_OFF_CPU_MS} ms): "
            f"{verdict(median <= TARGET_OTEL_OFF_CPU_MS)}"
        )
    if on_deltas:
        mean, median = sum(on_deltas) / len(on_deltas), statistics.median(on_deltas)
        out.append(
            f"tracing on (ratio 1.0, local sink) vs off: median {median:+.3f}, mean {mean:+.3f} ms CPU per "
            f"request over {len(on_deltas)} runs (target ≤ +{TARGET_OTEL_ON_CPU_MS} ms): "
            f"{verdict(median <= TARGET_OTEL_ON_CPU_MS)}"
        )
    return out


def base_lines(rows: list[Row]) -> list[str]:
    """``--base-src`` without ``--otel``: relay's CPU per request against base's, run by run (the two
    ran back to back in each round) and as the median of each load's differences."""
    out = ["", "relay (this build) vs base (--base-src), CPU ms/req, each pair run back to back:"]
    deltas: dict[str, list[float]] = {}
    for r in rows:
        base = find(rows, r.load, r.concurrency, "base") if r.target == "relay" else None
        if base is None or r.proxy_cpu_ms is None or base.proxy_cpu_ms is None:
            continue
        load = f"{r.load} {r.concurrency.split(' r')[0]}"  # the rounds of one load together
        delta = r.proxy_cpu_ms - base.proxy_cpu_ms
        deltas.setdefault(load, []).append(delta)
        out.append(
            f"  {r.load} {r.concurrency}: base {base.proxy_cpu_ms:.3f} → relay {r.proxy_cpu_ms:.3f} "
            f"({delta:+.3f}, {delta / base.proxy_cpu_ms * 100:+.0f} %); "
            f"others {base.others_cores:.2f} / {r.others_cores:.2f} cores"
        )
    for load, found in deltas.items():
        out.append(f"  {load}: median difference {statistics.median(found):+.3f} ms over {len(found)} pairs")
    return out


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report_targets(rows: list[Row], rate: float) -> list[str]:
    lines = [
        f"SPEC §13 targets (at {rate:g} req/s: the open-loop paced run; wrk think-time run in brackets):"
    ]
    direct, relay = pair(rows, "paced", f"{rate:g}/s")
    wdirect, wrelay = pair(rows, "wrk-think", f"{rate:g}/s")

    def added(d: Row | None, r: Row | None, attr: str) -> float | None:
        if d is None or r is None:
            return None
        return float(getattr(r.result, attr) - getattr(d.result, attr))

    for attr, limit, name in (("p50_ms", TARGET_P50_MS, "p50"), ("p99_ms", TARGET_P99_MS, "p99")):
        value = added(direct, relay, attr)
        other = added(wdirect, wrelay, attr)
        bracket = f" [{verdict(other < limit)} {other:+.2f} ms]" if other is not None else ""
        if value is None:
            lines.append(f"  added {name} < {limit:g} ms at {rate:g} req/s: not measured")
        else:
            lines.append(
                f"  added {name} < {limit:g} ms at {rate:g} req/s: {verdict(value < limit)} "
                f"({value:+.2f} ms){bracket}"
            )
    whole = [r for r in rows if r.target == "relay" and r.load != "stream" and r.proxy_cpu_ms is not None]
    if whole:
        worst = max(whole, key=lambda r: r.proxy_cpu_ms or 0.0)
        at_rate = relay.proxy_cpu_ms if relay is not None else None
        lines.append(
            f"  relay CPU ≤ {TARGET_CPU_MS:g} ms per proxied request: "
            f"{verdict((worst.proxy_cpu_ms or 0) <= TARGET_CPU_MS)} "
            f"(worst {worst.proxy_cpu_ms:.3f} ms: {worst.load} {worst.concurrency}"
            + (f"; {at_rate:.3f} ms at {rate:g} req/s" if at_rate is not None else "")
            + ")"
        )
    closed = [r for r in rows if r.target == "relay" and r.load == "closed"]
    if closed:
        best = max(closed, key=lambda r: r.result.rps)
        lines.append(
            f"  one process serves ≥ {TARGET_RPS:,.0f} req/s: {verdict(best.result.rps >= TARGET_RPS)} "
            f"({best.result.rps:,.0f} req/s at concurrency {best.concurrency}, generator and upstream "
            "on the same cores)"
        )
    lines.extend(floor_lines(rows, rate))
    lines.extend(translated_lines(rows))
    return lines


def translated_lines(rows: list[Row]) -> list[str]:
    """SPEC §7.3: a translated request (chat → an anthropic binding) next to the same-shape one, same run."""
    out: list[str] = []
    for r in rows:
        if r.target != "translated":
            continue
        same = find(rows, r.load, r.concurrency, "relay")
        if same is None:
            continue
        if not out:
            out.append(
                "Translated (OpenAI chat → anthropic-bound model) vs same shape (chat → openai binding), "
                f"same run (SPEC §7.3: ≤ {TARGET_TRANSLATE_CPU_MS:g} ms extra CPU per small non-streamed "
                "request):"
            )
        cpu = ""
        if r.proxy_cpu_ms is not None and same.proxy_cpu_ms is not None:
            extra = r.proxy_cpu_ms - same.proxy_cpu_ms
            mark = f" {verdict(extra <= TARGET_TRANSLATE_CPU_MS)}" if r.load != "stream" else ""
            cpu = f"CPU {same.proxy_cpu_ms:.3f} → {r.proxy_cpu_ms:.3f} ms/req ({extra:+.3f}){mark}; "
        out.append(
            f"  {r.load} {r.concurrency}: {cpu}added p50 {r.result.p50_ms - same.result.p50_ms:+.2f} ms, "
            f"p99 {r.result.p99_ms - same.result.p99_ms:+.2f} ms"
        )
    return out


def floor_lines(rows: list[Row], rate: float) -> list[str]:
    """Relay next to the floor proxy: what the extra hop costs any proxy here, and what Relay adds."""
    out: list[str] = []
    for load, label in (("paced", f"{rate:g}/s"), ("wrk-think", f"{rate:g}/s"), ("closed", "1")):
        direct, floor, relay = (find(rows, load, label, name) for name in ("direct", "floor", "relay"))
        if direct is None or floor is None or relay is None:
            continue
        if not out:
            out.append(
                "The floor (bench/floor_proxy.py: uvicorn + Relay's client, parse, rewrite model, forward; "
                "nothing else) vs direct = the hop, on this machine; relay vs floor = Relay's own work:"
            )
        hop50 = floor.result.p50_ms - direct.result.p50_ms
        hop99 = floor.result.p99_ms - direct.result.p99_ms
        own50 = relay.result.p50_ms - floor.result.p50_ms
        own99 = relay.result.p99_ms - floor.result.p99_ms
        cpu = ""
        if floor.proxy_cpu_ms is not None and relay.proxy_cpu_ms is not None:
            cpu = (
                f"; CPU {floor.proxy_cpu_ms:.3f} → {relay.proxy_cpu_ms:.3f} ms/req "
                f"({relay.proxy_cpu_ms - floor.proxy_cpu_ms:+.3f})"
            )
        out.append(
            f"  {load} {label}: floor adds p50 {hop50:+.2f} ms, p99 {hop99:+.2f} ms; "
            f"Relay over the floor p50 {own50:+.2f} ms, p99 {own99:+.2f} ms{cpu}"
        )
    return out


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.0, help="unrecorded seconds before each run")
    parser.add_argument("--concurrency", default="1,16,64", help="closed-loop levels, comma-separated")
    parser.add_argument("--stream-concurrency", type=int, default=16, help="0 skips the streaming run")
    parser.add_argument(
        "--rate",
        default="500",
        help="fixed-rate runs, req/s, comma-separated; the first is the one SPEC §13 names (0 skips them)",
    )
    parser.add_argument("--generator", choices=["auto", "wrk", "python"], default="auto")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (1 leaves more CPU to the rest)")
    parser.add_argument(
        "--redis",
        metavar="URL",
        help="run relay serve with RELAY_REDIS_URL=URL (shared state in Redis, as replicas run); "
        "default: state in process memory",
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="RELAY_LOG_LEVEL (default info, as shipped: one JSON line per request, into a file)",
    )
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the floor proxy (bench/floor_proxy.py) target"
    )
    parser.add_argument(
        "--budget",
        action="store_true",
        help="also run two relay targets with rules: tokens (a tokens rule) and budget (the same rule, "
        "a cost_usd spend limit and a fallback entry); budget - tokens = what budgets and fallbacks add",
    )
    parser.add_argument(
        "--otel",
        action="store_true",
        help="also run a second relay with tracing on (RELAY_OTEL_ENDPOINT = a local sink, "
        "bench/otlp_sink.py, sample ratio 1.0) as target traced: tracing off vs on in one run",
    )
    parser.add_argument(
        "--base-src",
        metavar="DIR",
        type=Path,
        help="also run a relay from this src/ directory (e.g. a worktree of the commit before a change) "
        "as target base, right before relay in every round: two builds at the same moment of the "
        "machine (with --otel: tracing off vs the build before it)",
    )
    parser.add_argument(
        "--src",
        metavar="DIR",
        type=Path,
        help="run the relay under test from this src/ directory (e.g. a worktree of the base commit), "
        "so two builds are measured by the same benchmark, run back to back",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="repeat the closed-loop and stream runs this many times, interleaved (a noisy machine: the "
        "--otel and --budget summaries average over every round)",
    )
    parser.add_argument(
        "--cache",
        action="store_true",
        help="also measure the response cache (bench/cache_mode.py): plain, miss, hit and direct, "
        "interleaved, relay CPU per request",
    )
    parser.add_argument("--cache-concurrency", type=int, default=16, help="closed-loop connections (--cache)")
    parser.add_argument(
        "--cache-rounds", type=int, default=3, help="interleaved rounds of the four (--cache)"
    )
    parser.add_argument("--cache-only", action="store_true", help="with --cache: skip the other runs")
    parser.add_argument(
        "--guardrails",
        action="store_true",
        help="also measure input guardrails on a 2 KB request vs the plain policy — two (a regex + "
        "PII, issue 33's case) and three (two regexes + PII) — and a stream output guardrail "
        "(bench/guard_mode.py), interleaved, relay CPU per request",
    )
    parser.add_argument("--guard-concurrency", type=int, default=16, help="closed-loop connections")
    parser.add_argument("--guard-rounds", type=int, default=5, help="interleaved rounds (--guardrails)")
    parser.add_argument("--guard-only", action="store_true", help="with --guardrails: skip the other runs")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    rates = [r for r in (float(x) for x in args.rate.split(",") if x.strip()) if r > 0]
    wrk = find_wrk(args.generator)
    n_runs = (3 if args.no_floor else 4) + (2 if args.budget else 0)
    n_runs += (1 if args.otel else 0) + (1 if args.otel and args.base_src else 0)
    n_runs *= (len(levels) + (1 if args.stream_concurrency else 0)) * args.rounds + len(rates) * (
        2 if wrk else 1
    )
    print(f"Relay live overhead (SPEC §13) — {machine_line()}")
    generator = (
        f"{wrk_version(wrk)} ({args.threads} thread)"
        if wrk
        else "python asyncio+aiohttp (wrk not installed: the generator shares the cores and is slower "
        "than the servers, so req/s are lower bounds and latencies include its own delays)"
    )
    print(f"generator: {generator}")
    print(
        f"{n_runs} runs of {args.warmup:g} s warm-up + {args.duration:g} s, "
        f"about {n_runs * (args.warmup + args.duration) + 10:.0f} s in all",
        flush=True,
    )

    body = json.dumps(CHAT_BODY, separators=(",", ":")).encode()
    stream_body = json.dumps({**CHAT_BODY, "stream": True}, separators=(",", ":")).encode()
    with Processes() as procs, tempfile.TemporaryDirectory(prefix="relay-bench-") as tmpdir:
        tmp = Path(tmpdir)
        fake, upstream = start_fake_upstream(procs)
        relay = start_relay(
            procs,
            tmp,
            extra_env={"RELAY_REDIS_URL": args.redis} if args.redis else None,
            log_level=args.log_level,
            src=args.src.resolve() if args.src else SRC,
        )
        key = configure(relay, upstream, budget=args.budget, cache=args.cache, guard=args.guardrails)
        direct = Target(
            "direct", upstream + "/v1/chat/completions", {"Authorization": f"Bearer {UPSTREAM_KEY}"}
        )
        chat = "/v1/chat/completions"
        via = Target("relay", relay.base_url + chat, {"Authorization": f"Bearer {key}"})
        translated = Target(
            "translated", relay.base_url + "/v1/chat/completions", via.headers, model=TRANSLATED_MODEL
        )
        check = httpx.post(
            direct.url, content=body, headers={**direct.headers, "Content-Type": "application/json"}
        )
        check.raise_for_status()
        targets = [direct, via, translated]
        pids = {"relay": relay.process.pid, "upstream": fake.pid}
        if not args.no_floor:
            floor_process, floor_base = start_floor_proxy(procs, upstream)
            targets = [direct, Target("floor", floor_base + "/v1/chat/completions", {}), via, translated]
            pids["floor"] = floor_process.pid
        if args.budget:
            for label, policy in (("tokens", "bench-tokens"), ("budget", "bench-budget")):
                policy_key = mint_key(relay, policy)
                targets.append(Target(label, via.url, {"Authorization": f"Bearer {policy_key}"}))
        if args.otel:
            _sink, sink_url = start_announcing(
                procs, [sys.executable, str(Path(__file__).resolve().parent / "otlp_sink.py")], "otlp-sink"
            )
            traced_env = {"RELAY_OTEL_ENDPOINT": sink_url, "RELAY_OTEL_SAMPLE_RATIO": "1.0"}
            if args.redis:
                traced_env["RELAY_REDIS_URL"] = args.redis
            tracing = start_relay(procs, tmp / "traced", extra_env=traced_env, log_level=args.log_level)
            traced_key = configure(tracing, upstream, budget=args.budget)
            pids["traced"] = tracing.process.pid
            traced = Target("traced", tracing.base_url + chat, {"Authorization": f"Bearer {traced_key}"})
            targets.insert(targets.index(via) + 1, traced)  # base, relay (off), traced (on) side by side
        if args.base_src:
            base = start_relay(
                procs,
                tmp / "base",
                extra_env={"RELAY_REDIS_URL": args.redis} if args.redis else None,
                log_level=args.log_level,
                src=args.base_src.resolve(),
            )
            base_key = configure(base, upstream, budget=args.budget)
            pids["base"] = base.process.pid
            base_auth = {"Authorization": f"Bearer {base_key}"}
            targets.insert(targets.index(via), Target("base", base.base_url + chat, base_auth))
        idle = CpuMeter(pids)
        idle.start()
        time.sleep(1.0)
        idle.stop()
        print(
            f"relay serve pid {relay.process.pid} (one process, uvloop, embedded SQLite, "
            f"{'state in Redis' if args.redis else 'state in process memory'}, log level {args.log_level}), "
            f"idle CPU {idle.seconds['relay'] * 1000:.1f} ms/s; fake upstream pid {fake.pid}; "
            f"machine busy before the runs (other processes): {idle.busy_pct:.0f} %",
            flush=True,
        )

        bench = Bench(args, wrk, tmp, pids)
        cached = run_cache_mode(args, relay, direct, via, pids) if args.cache else []
        cached += run_guard_mode(args, relay, via, pids) if args.guardrails else []
        if args.cache_only or args.guard_only:
            levels, rates, args.stream_concurrency = [], [], 0
        try:
            for n in range(args.rounds):
                bench.round_label = f" r{n + 1}" if args.rounds > 1 else ""
                for concurrency in levels:
                    for target in targets:
                        bench.closed("closed", target, body, False, concurrency)
                if args.stream_concurrency:
                    for target in targets:
                        bench.closed("stream", target, stream_body, True, args.stream_concurrency)
            for rate in rates:
                for target in targets:
                    bench.paced(target, body, rate)
                if wrk:
                    for target in targets:
                        bench.wrk_think(target, body, rate)
        except (subprocess.SubprocessError, RuntimeError, OSError) as exc:
            print(f"a run failed, reporting what was measured: {exc!r}", file=sys.stderr)
        relay_rss = rss_mib(relay.process.pid)
        sink_stats = ""
        if args.otel:
            time.sleep(6)  # past OTEL_BSP_SCHEDULE_DELAY (5 s): the last spans are exported too
            try:
                got = httpx.get(sink_url + "/stats", timeout=5).json()
                sink_stats = f"otlp sink received {got['exports']} exports, {got['bytes']:,} bytes"
            except httpx.HTTPError as exc:
                sink_stats = f"otlp sink did not answer: {exc!r}"
        if relay.process.poll() is not None:
            print(f"relay serve died during the runs:\n{relay.log_tail()}", file=sys.stderr)

    rows = bench.rows
    print()
    print(f"Relay live overhead — {machine_line()}")
    print(f"generator: {generator}; {args.duration:g} s per run after {args.warmup:g} s warm-up")
    for line in (
        "direct = fake upstream /v1/chat/completions; relay = Relay /v1/chat/completions → the same upstream",
        "floor = bench/floor_proxy.py → the same upstream: the thinnest proxy on Relay's stack",
        f"translated = Relay /v1/chat/completions for {TRANSLATED_MODEL} (anthropic binding): translated to "
        "/v1/messages and back (SPEC §7.3)",
        "closed = closed loop: each connection sends again as soon as it is answered",
        "stream = closed loop with stream: true; latency = until the last byte",
        "paced = open loop at a fixed rate (python generator), latency from each request's due time",
        f"wrk-think = wrk, {WRK_PACED_CONNECTIONS} connections, each waiting {WRK_PACED_CONNECTIONS} s/rate",
        "    between an answer and its next request (a bit under the rate; wrk2 -R is not available)",
        "proxy CPU ms/req = the proxy's CPU time (user + sys) during the run / requests answered",
        "others (cores) = CPU the machine spent on processes outside this benchmark during the run",
        *(
            [
                "tokens = relay with a policy holding a tokens rule (one state round trip per phase)",
                "budget = relay with that rule + a cost_usd limit + a fallback entry (same round trips)",
            ]
            if args.budget
            else []
        ),
    ):
        print(line)
    print()
    print(render_table(rows))
    for r in rows:
        if r.result.errors:
            kinds = r.result.extra.get("error_kinds", "connect/read/write/timeout errors or non-2xx (wrk)")
            print(f"errors in {r.load} {r.target} {r.concurrency}: {kinds}")
    print()
    print(
        f"relay RSS after the runs: {relay_rss:.0f} MiB; machine busy before the runs (other processes): "
        f"{idle.busy_pct:.0f} %"
    )
    if args.budget:
        for line in budget_lines(rows):
            print(line)
    if args.otel:
        for line in otel_lines(rows):
            print(line)
        print(sink_stats)
    elif args.base_src:
        for line in base_lines(rows):
            print(line)
    for line in cached:
        print(line)
    if rates:
        for line in report_targets(rows, rates[0]):
            print(line)
    else:
        print("SPEC §13 latency targets: not measured (no --rate run)")
    print(
        "(a benchmark, not a test: nothing here fails the build; the load generator, the fake upstream "
        f"and Relay share {os.cpu_count()} CPU(s))"
    )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: every process this benchmark started has been stopped", file=sys.stderr)
        sys.exit(130)
