"""What does translating one small live request cost in Relay's process? (Issue 33: translation adds
≤ 0.05 ms CPU per request; SPEC §7.3.)

The live benchmark (``live_overhead.py``: the translated row against the relay row) measures the whole
request, where ±0.03 ms of noise hides a change of a few µs. This measures only the translation work a
translated request adds, in one process, without sockets: the bench's small chat body (``CHAT_BODY``)
sent to an ``anthropic`` binding —

- **request**: ``translate_request`` (chat → Messages), what ``LiveHandler._admission`` does;
- **response**: ``translate_response`` of the fake upstream's ``message`` answer back to a
  ``chat.completion``, what ``LiveHandler._translated_body`` does;
- **whole** = both, one request's translation;
- **stream**: a ``TranslatingStream`` fed the fake upstream's Messages event stream for the same body,
  chunk by chunk, until ``finish`` (per stream, not per event).

Each figure is CPU time (``time.process_time``) per operation over ``--iterations`` iterations, after a
warm-up. A loop this hot runs faster than the same code inside a busy server (caches stay warm), so
read the figures as relative: the live server spends roughly 2–3× these µs.

``--base-src DIR`` (another checkout's ``src/``, e.g. a worktree of the base commit) measures that code
too, each run in a fresh process, interleaved run by run; the table shows medians (min–max) over
``--rounds`` and the change. A benchmark, not a test: it prints, and exits 0 once it measured.

    .venv/bin/python bench/translate_cost.py [--iterations 20000] [--rounds 5] [--base-src ../base/src]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OWN_SRC = HERE.parent / "src"
CASES = ("request", "response", "whole", "stream")


def measure(iterations: int) -> dict[str, float]:
    """µs of CPU per operation, on whichever ``relay`` PYTHONPATH gives this process."""
    import orjson

    from common import CHAT_BODY
    from relay.adapters import TranslatingStream, translate_request, translate_response
    from relay.fake_upstream.anthropic import render, render_stream

    body = {**CHAT_BODY, "model": "bench-claude"}
    upstream, _ = translate_request("openai", "anthropic", body, default_max_tokens=4096)
    answer = orjson.dumps(render(upstream, "claude-upstream"))
    chunks = render_stream({**upstream, "stream": True}, "claude-upstream")

    def request() -> Any:
        return translate_request("openai", "anthropic", body, default_max_tokens=4096)

    def response() -> Any:
        return translate_response("anthropic", "openai", answer, model="bench-claude")

    def whole() -> Any:
        request()
        return response()

    def stream() -> Any:
        translating = TranslatingStream("anthropic", "openai", model="bench-claude")
        for chunk in chunks:
            translating.feed(chunk)
        return translating.finish()

    out: dict[str, float] = {}
    operations = (("request", request), ("response", response), ("whole", whole), ("stream", stream))
    for name, operation in operations:
        for _ in range(iterations // 10):
            operation()
        started = time.process_time()
        for _ in range(iterations):
            operation()
        out[name] = (time.process_time() - started) / iterations * 1e6
    return out


def run_in(script: Path, src: Path, iterations: int) -> dict[str, float]:
    """``script --worker`` in a fresh process on ``src``'s ``relay``: its figures."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE)])}
    done = subprocess.run(
        [sys.executable, str(script), "--worker", "--iterations", str(iterations)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} ({min(values):.2f}–{max(values):.2f})"


def compare(script: Path, cases: tuple[str, ...], measure_here: Any, doc: str | None) -> None:
    """The command line both micro-benchmarks share: ``--worker`` measures in this process; otherwise
    this checkout's ``src/`` (and ``--base-src``'s) are run in fresh processes, interleaved round by
    round, and the medians printed."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--base-src", type=Path, default=None, help="another checkout's src/ to compare")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure_here(args.iterations)))
        return
    builds = [("this", OWN_SRC)] + ([("base", args.base_src.resolve())] if args.base_src else [])
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _ in builds}
    for round_no in range(args.rounds):
        for name, src in builds if round_no % 2 == 0 else builds[::-1]:
            runs[name].append(run_in(script, src, args.iterations))
            figures = ", ".join(f"{k} {v:.2f}" for k, v in runs[name][-1].items())
            print(f"  round {round_no + 1} {name}: {figures}", flush=True)
    print(f"\nCPU µs per operation, medians (min–max) over {args.rounds} rounds of {args.iterations:,}:")
    header = f"  {'operation':<10}" + "".join(f"{name:>24}" for name, _ in builds)
    print(header + ("   this − base" if args.base_src else ""))
    for case in cases:
        cells = "".join(f"{summary([r[case] for r in runs[name]]):>24}" for name, _ in builds)
        change = ""
        if args.base_src:
            this = statistics.median(r[case] for r in runs["this"])
            base = statistics.median(r[case] for r in runs["base"])
            change = f"   {this - base:+7.2f} ({(this - base) / base * 100:+.0f} %)"
        print(f"  {case:<10}{cells}{change}")


if __name__ == "__main__":
    compare(Path(__file__).resolve(), CASES, measure, __doc__)
