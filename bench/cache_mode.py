"""``live_overhead.py --cache``: what the response cache (SPEC §19) costs on a miss and saves on a hit.

Three more targets on the same ``relay serve``, measured interleaved with a plain baseline in one run,
each a closed loop of ``--cache-concurrency`` connections (python generator: it can vary the body):

- **plain** = relay, the plain policy (no cache), a unique body per request: the baseline;
- **miss** = relay, policy ``bench-cache`` (``cache: {ttl: 1h}``), a unique body per request, so every
  request looks up, misses, goes upstream and stores its answer;
- **hit** = relay, the same policy, one body for every request: answered from the cache, no upstream;
- **direct** = the fake upstream itself, the round trip a hit saves.

Reports Relay's CPU ms per request for each (its process's user + sys / requests answered), miss − plain
(target ≤ +0.1 ms) and the hit's latency vs plain (the same request making the upstream round trip a
hit saves; direct, the upstream alone, is shown beside it).
The rounds (``--cache-rounds``) repeat the four runs, every other round in reverse order, so base and
after alternate in time and neither always runs first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from common import CHAT_BODY, CpuMeter, LoadResult, from_latencies, run_async

CACHE_POLICY = "bench-cache"
REQUEST_TIMEOUT_S = 30.0


def cache_catalog() -> list[dict[str, Any]]:
    """The policy the cache targets run under: the plain policy's pool, with a one-hour cache."""
    spec = {"models": ["*"], "host_keys": ["fake-key"], "cache": {"ttl": "1h"}}
    return [{"kind": "Policy", "name": CACHE_POLICY, "spec": spec}]


def unique_bodies() -> Callable[[], bytes]:
    counter = itertools.count()
    prefix = json.dumps(CHAT_BODY, separators=(",", ":"))

    def body() -> bytes:
        data = json.loads(prefix)
        data["messages"] = [{"role": "user", "content": f"cache bench {next(counter)} {time.time_ns()}"}]
        return json.dumps(data, separators=(",", ":")).encode()

    return body


async def closed_loop_bodies(
    url: str, bodies: Callable[[], bytes], headers: Mapping[str, str], concurrency: int, duration: float
) -> LoadResult:
    """``concurrency`` workers POSTing ``bodies()`` again as soon as each answer is read."""
    import aiohttp

    latencies: list[float] = []
    reasons: Counter[str] = Counter()
    deadline = time.perf_counter() + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        while (start := time.perf_counter()) < deadline:
            try:
                async with session.post(url, data=bodies(), headers=dict(headers)) as response:
                    await response.read()
                    ok = response.status == 200
            except (aiohttp.ClientError, TimeoutError) as exc:
                reasons[type(exc).__name__] += 1
                continue
            if ok:
                latencies.append(time.perf_counter() - start)
            else:
                reasons[f"status {response.status}"] += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return from_latencies(latencies, elapsed, sum(reasons.values()), error_kinds=dict(reasons))


def cache_runs(
    *,
    pids: dict[str, int],
    relay_url: str,
    upstream_url: str,
    plain_headers: Mapping[str, str],
    cache_headers: Mapping[str, str],
    upstream_headers: Mapping[str, str],
    concurrency: int,
    rounds: int,
    warmup: float,
    duration: float,
) -> dict[str, list[tuple[LoadResult, float]]]:
    """Each target's (result, relay CPU ms/req) per round, the four targets interleaved."""
    fixed = json.dumps(CHAT_BODY, separators=(",", ":")).encode()
    json_headers = {"Content-Type": "application/json"}
    targets: list[tuple[str, str, Mapping[str, str], Callable[[], bytes]]] = [
        ("plain", relay_url, plain_headers, unique_bodies()),
        ("miss", relay_url, cache_headers, unique_bodies()),
        ("hit", relay_url, cache_headers, lambda: fixed),
        ("direct", upstream_url, upstream_headers, lambda: fixed),
    ]
    out: dict[str, list[tuple[LoadResult, float]]] = {name: [] for name, *_ in targets}
    for round_no in range(rounds):
        # Every other round runs the targets in reverse, so neither side of a pair always goes first.
        for name, url, headers, bodies in targets if round_no % 2 == 0 else targets[::-1]:
            sent = {**json_headers, **headers}
            run_async(closed_loop_bodies(url, bodies, sent, concurrency, warmup))
            meter = CpuMeter(pids)
            meter.start()
            result: LoadResult = run_async(closed_loop_bodies(url, bodies, sent, concurrency, duration))
            meter.stop()
            relay_ms = meter.seconds["relay"] * 1000 / (result.requests or 1)
            out[name].append((result, relay_ms))
            print(
                f"   cache round {round_no + 1} {name:<6}: {result.rps:8,.0f} req/s"
                f"  p50 {result.p50_ms:6.2f} ms"
                f"  p99 {result.p99_ms:6.2f} ms  errors {result.errors}  relay CPU {relay_ms:.3f} ms/req"
                f"  other processes {meter.others_cores:.2f} cores",
                flush=True,
            )
    return out


def cache_lines(runs: dict[str, list[tuple[LoadResult, float]]]) -> list[str]:
    """The summary: median over rounds of each target's relay CPU and p50, and the two targets."""

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2] if ordered else 0.0

    cpu = {name: median([ms for _, ms in rows]) for name, rows in runs.items()}
    p50 = {name: median([r.p50_ms for r, _ in rows]) for name, rows in runs.items()}
    errors = {name: sum(r.errors for r, _ in rows) for name, rows in runs.items()}
    lines = [
        "response cache (closed loop, python generator; medians over the rounds):",
        *(
            f"  {name:<6} relay CPU {cpu[name]:.3f} ms/req, p50 {p50[name]:.2f} ms, errors {errors[name]}"
            for name in runs
        ),
    ]
    miss_delta = cpu["miss"] - cpu["plain"]
    lines.append(
        f"  miss vs plain: {miss_delta:+.3f} ms CPU/req — {'PASS' if miss_delta <= 0.1 else 'MISS'} "
        "(target ≤ +0.1 ms)"
    )
    lines.append(
        f"  hit p50 {p50['hit']:.2f} ms vs relay plain {p50['plain']:.2f} ms (the same request with its "
        f"upstream round trip), direct {p50['direct']:.2f} ms (the upstream alone); hit CPU "
        f"{cpu['hit'] - cpu['plain']:+.3f} ms/req vs plain — "
        f"{'PASS' if p50['hit'] < p50['plain'] else 'MISS'} (a hit answers sooner than the upstream round "
        "trip it saves)"
    )
    return lines
