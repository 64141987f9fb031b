"""``live_overhead.py --guardrails``: what guardrails (SPEC §20) cost per request, whole and streamed.

Five targets on the same ``relay serve``, interleaved in one run, each a closed loop of
``--guard-concurrency`` connections sending the same 2 KB chat request (prose with digits, no match):

- **plain** = the plain policy (no guardrails): the baseline;
- **guarded-two** = policy ``bench-guard-two``: issue 33's case, two input guardrails — the API-key
  regex that blocks and the PII guardrail below (a regex and a detector, the costlier pair);
- **guarded** = policy ``bench-guard``: three input guardrails, two regexes (an API-key pattern that
  blocks, a cloud-key pattern that redacts) and one PII guardrail (email, credit_card, us_ssn; redact);
- **plain-stream** = the plain policy, the request with ``stream: true``: the streamed baseline;
- **guarded-stream** = policy ``bench-guard-out``, streamed: one output guardrail (a regex and email,
  redact), so every text delta passes through the stream window.

Reports Relay's CPU ms per request for each (its process's user + sys / requests answered), medians
over ``--guard-rounds`` rounds (every other round in reverse order): guarded-two − plain (issue 33:
≤ +0.05 ms for two guardrails), guarded − plain (SPEC §20: ≤ +0.2 ms; issue 33's figure for two is
judged on guarded-two, not on this one) and guarded-stream − plain-stream (reported; no target).
"""

from __future__ import annotations

import json
from typing import Any

from cache_mode import closed_loop_bodies
from common import CHAT_BODY, CpuMeter, LoadResult, run_async

GUARD_POLICY = "bench-guard"
TWO_GUARD_POLICY = "bench-guard-two"
TWO_GUARDRAILS = ("bench-api-keys", "bench-pii")
STREAM_GUARD_POLICY = "bench-guard-out"
OUTPUT_GUARDRAIL = {
    "kind": "Guardrail",
    "name": "bench-out",
    "spec": {"stage": "output", "action": "redact", "regex": ["sk-[A-Za-z0-9]{20,}"]},
}
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
    """The guarded policies, each on the plain policy's pool: the three input guardrails; two of them
    (issue 33's case); the output guardrail."""
    spec = {"models": ["*"], "host_keys": ["fake-key"], "guardrails": [g["name"] for g in GUARDRAILS]}
    two = {"models": ["*"], "host_keys": ["fake-key"], "guardrails": list(TWO_GUARDRAILS)}
    out = {"models": ["*"], "host_keys": ["fake-key"], "guardrails": [OUTPUT_GUARDRAIL["name"]]}
    return [
        *GUARDRAILS,
        OUTPUT_GUARDRAIL,
        {"kind": "Policy", "name": GUARD_POLICY, "spec": spec},
        {"kind": "Policy", "name": TWO_GUARD_POLICY, "spec": two},
        {"kind": "Policy", "name": STREAM_GUARD_POLICY, "spec": out},
    ]


def two_kb_body(*, stream: bool = False) -> bytes:
    sentence = "The order 4521 shipped on day 12 with 3 boxes and a note for the team at the depot. "
    text = (sentence * (2048 // len(sentence) + 1))[:2048]
    streamed = {"stream": True} if stream else {}
    return json.dumps({**CHAT_BODY, **streamed, "messages": [{"role": "user", "content": text}]}).encode()


def guard_runs(
    *,
    pids: dict[str, int],
    relay_url: str,
    plain_headers: dict[str, str],
    guard_headers: dict[str, str],
    two_guard_headers: dict[str, str],
    stream_guard_headers: dict[str, str],
    concurrency: int,
    rounds: int,
    warmup: float,
    duration: float,
) -> dict[str, list[tuple[LoadResult, float]]]:
    """Each target's (result, relay CPU ms/req) per round, the targets interleaved."""
    whole, streamed = two_kb_body(), two_kb_body(stream=True)
    targets = [
        ("plain", plain_headers, whole),
        ("guarded-two", two_guard_headers, whole),
        ("guarded", guard_headers, whole),
        ("plain-stream", plain_headers, streamed),
        ("guarded-stream", stream_guard_headers, streamed),
    ]
    out: dict[str, list[tuple[LoadResult, float]]] = {name: [] for name, _, _ in targets}
    for round_no in range(rounds):
        for name, headers, body in targets if round_no % 2 == 0 else targets[::-1]:
            sent = {"Content-Type": "application/json", **headers}
            run_async(closed_loop_bodies(relay_url, lambda b=body: b, sent, concurrency, warmup))
            meter = CpuMeter(pids)
            meter.start()
            result = run_async(closed_loop_bodies(relay_url, lambda b=body: b, sent, concurrency, duration))
            meter.stop()
            relay_ms = meter.seconds["relay"] * 1000 / (result.requests or 1)
            out[name].append((result, relay_ms))
            print(
                f"   guard round {round_no + 1} {name:<14}: {result.rps:8,.0f} req/s"
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
    two = cpu["guarded-two"] - cpu["plain"]
    delta = cpu["guarded"] - cpu["plain"]
    streamed = cpu["guarded-stream"] - cpu["plain-stream"]
    return [
        "guardrails, 2 KB request (closed loop, python generator; medians over the rounds):",
        *(f"  {name:<14} relay CPU {cpu[name]:.3f} ms/req" for name in runs),
        f"  guarded-two vs plain (input; two guardrails: {' + '.join(TWO_GUARDRAILS)}): {two:+.3f} ms "
        f"CPU/req — {'PASS' if two <= 0.05 else 'MISS'} (issue 33: ≤ +0.05 ms for two guardrails)",
        f"  guarded vs plain (input; three guardrails: two regexes + PII): {delta:+.3f} ms CPU/req — "
        f"{'PASS' if delta <= 0.2 else 'MISS'} (SPEC §20: ≤ +0.2 ms)",
        f"  guarded-stream vs plain-stream (output window): {streamed:+.3f} ms CPU/req (no target)",
    ]
