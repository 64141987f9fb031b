"""What do input guardrails cost one request in Relay's process? (Issue 33: two guardrails add
≤ 0.05 ms CPU per request; SPEC §20.)

The in-process counterpart of ``live_overhead.py --guardrails`` (bench/guard_mode.py): the same 2 KB
chat request (prose with digits, nothing to block or redact) and the same guardrails, checked the way
``relay.inference.guarded.guard_input`` checks a live request — ``check_body`` over the parsed body —
without sockets or the rest of the request:

- **two** = the API-key regex (block) and the PII guardrail (email, credit_card, us_ssn; redact):
  issue 33's case;
- **three** = those and the cloud-key regex (redact): the live benchmark's ``guarded`` policy;
- **pii** = the PII guardrail alone.

Figures, the ``--base-src`` comparison and the caveat on hot loops: as bench/translate_cost.py.

    .venv/bin/python bench/guard_cost.py [--iterations 20000] [--rounds 5] [--base-src ../base/src]
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from translate_cost import compare

CASES = ("two", "three", "pii")


class _Uncounted:
    """Stands in for the Prometheus counters (nothing is counted when nothing acts)."""

    def labels(self, *values: str) -> _Uncounted:
        return self

    def inc(self, amount: float = 1) -> None:
        pass


def measure(iterations: int) -> dict[str, float]:
    """µs of CPU per request checked, on whichever ``relay`` PYTHONPATH gives this process."""
    import orjson

    from guard_mode import GUARDRAILS, TWO_GUARDRAILS, two_kb_body
    from relay.domain.guardrails import Guardrail
    from relay.request.guardrails.step import Asked, GuardrailStep, check_body

    by_name = {
        g["name"]: Guardrail.from_row(
            {
                "id": g["name"],
                "name": g["name"],
                "stage": "input",
                "action": g["spec"].get("action", "block"),
                "regex": g["spec"].get("regex"),
                "pii": g["spec"].get("pii"),
            }
        )
        for g in GUARDRAILS
    }
    policies = {
        "two": [by_name[name] for name in TWO_GUARDRAILS],
        "three": list(by_name.values()),
        "pii": [by_name["bench-pii"]],
    }
    step = GuardrailStep(_Uncounted(), _Uncounted())
    body = two_kb_body()

    request = orjson.loads(body)  # never changed: nothing in it is redacted (asserted)

    async def run(guardrails: list[Any], times: int) -> None:
        for _ in range(times):
            verdict = await check_body(step, "input", guardrails, request, Asked("m", "prj", "req"))
            assert verdict.blocked is None and not verdict.applied

    out: dict[str, float] = {}
    for name, guardrails in policies.items():
        asyncio.run(run(guardrails, iterations // 10))
        started = time.process_time()
        asyncio.run(run(guardrails, iterations))
        out[name] = (time.process_time() - started) / iterations * 1e6
    return out


if __name__ == "__main__":
    compare(Path(__file__).resolve(), CASES, measure, __doc__)
