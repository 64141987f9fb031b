"""``live_overhead.py --guardrails``: what input guardrails (SPEC §20) cost per request.

Two targets on the same ``relay serve``, interleaved in one run, each a closed loop of
``--guard-concurrency`` connections sending the same 2 KB chat request (prose with digits, no match):

- **plain** = the plain policy (no guardrails): the baseline;
- **guarded** = policy ``bench-guard``: two regex input guardrails (an API-key pattern that blocks, a
  cloud-key pattern that redacts) and one PII input guardrail (email, credit_card, us_ssn; redact).

Reports Relay's CPU ms per request for each (its process's user + sys / requests answered), medians
over ``--guard-rounds`` rounds (every other round in reverse order), and guarded − plain (target
≤ +0.2 ms).
"""

from __future__ import annotations

import json
from typing import Any

from cache_mode import closed_loop_bodies
from common import CHAT_BODY, CpuMeter, LoadResult, run_async

GUARD_POLICY = "bench-guard"
GUARDRAILS = [
    {
        "kind": "Guardrail",
        "name": "bench-api-keys",
        "spec": {"stage": "input", "regex": ["sk-[A-Za-z0-9]{20,}"]},
    },
    {
        "kind": "Guardrail",
        "name": "bench-cloud-keys",
        "spec": {"stage": "input", "action": "redact", "regex": ["AKIA[0-9A-Z]{16}"]},
    },
    {
        "kind": "Guardrail",
        "name": "bench-pii",
        "spec": {"stage": "input", "action": "redact", "pii": ["email", "credit_card", "us_ssn"]},
    },
]


def guard_catalog() -> list[dict[str, Any]]:
    """The guarded policy: the plain policy's pool and the three input guardrails."""
    spec = {"models": ["*"], "host_keys": ["fake-key"], "guardrails": [g["name"] for g in GUARDRAILS]}
    return [*GUARDRAILS, {"kind": "Policy", "name": GUARD_POLICY, "spec": spec}]


def two_kb_body() -> bytes:
    sentence = "The order 4521 shipped on day 12 with 3 boxes and a note for the team at the depot. "
    text = (sentence * (2048 // len(sentence) + 1))[:2048]
    return json.dumps({**CHAT_BODY, "messages": [{"role": "user", "content": text}]}).encode()


def guard_runs(
    *,
    pids: dict[str, int],
    relay_url: str,
    plain_headers: dict[str, str],
    guard_headers: dict[str, str],
    concurrency: int,
    rounds: int,
    warmup: float,
    duration: float,
) -> dict[str, list[tuple[LoadResult, float]]]:
    """Each target's (result, relay CPU ms/req) per round, the two interleaved."""
    body = two_kb_body()
    targets = [("plain", plain_headers), ("guarded", guard_headers)]
    out: dict[str, list[tuple[LoadResult, float]]] = {name: [] for name, _ in targets}
    for round_no in range(rounds):
        for name, headers in targets if round_no % 2 == 0 else targets[::-1]:
            sent = {"Content-Type": "application/json", **headers}
            run_async(closed_loop_bodies(relay_url, lambda: body, sent, concurrency, warmup))
            meter = CpuMeter(pids)
            meter.start()
            result = run_async(closed_loop_bodies(relay_url, lambda: body, sent, concurrency, duration))
            meter.stop()
            relay_ms = meter.seconds["relay"] * 1000 / (result.requests or 1)
            out[name].append((result, relay_ms))
            print(
                f"   guard round {round_no + 1} {name:<7}: {result.rps:8,.0f} req/s"
                f"  p50 {result.p50_ms:6.2f} ms"
                f"  errors {result.errors}  relay CPU {relay_ms:.3f} ms/req"
                f"  other processes {meter.others_cores:.2f} cores",
                flush=True,
            )
    return out


def guard_lines(runs: dict[str, list[tuple[LoadResult, float]]]) -> list[str]:
    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return ordered[len(ordered) // 2] if ordered else 0.0

    cpu = {name: median([ms for _, ms in rows]) for name, rows in runs.items()}
    delta = cpu["guarded"] - cpu["plain"]
    return [
        "input guardrails, 2 KB request (closed loop, python generator; medians over the rounds):",
        *(f"  {name:<7} relay CPU {cpu[name]:.3f} ms/req" for name in runs),
        f"  guarded vs plain: {delta:+.3f} ms CPU/req — {'PASS' if delta <= 0.2 else 'MISS'} "
        "(target ≤ +0.2 ms)",
    ]
