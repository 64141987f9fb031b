"""What does offloading a 50 000-line batch to a provider's batch API cost Relay? (SPEC §22)

Measures Relay's provider batch clients (``relay.batches.offload.openai_api``, ``anthropic_api``), in
this process, against the fake upstream's native batch APIs (``python -m relay.fake_upstream``, its own
process, so its CPU is not counted): for ``--items`` (50 000) ≈ ``--item-bytes`` (1 KB) chat or
messages requests,

1. **submit**: wall time and this process's CPU to send the batch (OpenAI: build the JSONL, upload it
   with ``POST /v1/files``, ``POST /v1/batches``; Anthropic: ``POST /v1/messages/batches``);
2. **map**: once the batch ended (``batch_phase_ms`` 0: the first poll sees it ended), CPU and wall
   time to read every result and map it into the engine's terms (``ProviderLine``), and the peak of
   Python memory allocated while mapping (``tracemalloc``, a separate pass: it slows the code it
   watches). Baseline, same run, same bytes: ``orjson.loads`` of every result line (the floor).
   ``Relay CPU`` is the submit plus the mapping (a poll costs one small GET).

3. **engine** (``--engine``, ``bench/offload_engine.py``): the whole batch through ``relay serve`` — a
   §15 create of ``--items`` to a ``native`` binding, Relay's CPU from the create to ``ended``
   (storing, sending, polling, mapping every result into its item, body and usage event) and its peak
   RSS, next to the same batch run by Relay's own workers (the baseline, same run).

A benchmark, not a test: it exits 0 once measured.

    .venv/bin/python bench/offload_batch.py [--items 50000] [--item-bytes 1024] [--apis openai,anthropic]
        [--runs 2] [--engine] [--engine-items 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Processes, markdown_table, start_fake_upstream
from offload_engine import ENGINE_HEADERS, engine_rows
from relay.batches.offload.anthropic_api import AnthropicBatchAPI
from relay.batches.offload.openai_api import OpenAIBatchAPI
from relay.batches.offload.provider import ProviderBatch
from relay.upstream import Upstream


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def bodies(api: str, items: int, item_bytes: int) -> list[tuple[str, bytes]]:
    pad = "x" * max(0, item_bytes - 120)
    out = []
    for n in range(items):
        text = f"item {n} {pad}"
        if api == "openai":
            body: dict[str, Any] = {"model": "bench-model", "messages": [{"role": "user", "content": text}]}
        else:
            body = {"model": "bench-model", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
        out.append((f"item-{n}", orjson.dumps(body)))
    return out


async def one_run(api: str, base_url: str, lines: list[tuple[str, bytes]]) -> dict[str, float]:
    upstream = Upstream(timeout_s=600)
    await upstream.start()
    try:
        client: Any = (
            OpenAIBatchAPI(upstream, base_url, "sk-bench")
            if api == "openai"
            else AnthropicBatchAPI(upstream, base_url, "sk-ant-bench")
        )
        endpoint = "/v1/chat/completions" if api == "openai" else "/v1/messages"
        wall, used = time.perf_counter(), cpu()
        created: ProviderBatch = await client.create(endpoint, lines)
        submit_s, submit_cpu = time.perf_counter() - wall, cpu() - used
        ended = await client.poll(created.id)
        while ended.ending is None:
            await asyncio.sleep(0.05)
            ended = await client.poll(created.id)

        wall, used = time.perf_counter(), cpu()
        mapped = len([line async for line in client.results(ended)])
        map_s, map_cpu = time.perf_counter() - wall, cpu() - used
        assert mapped == len(lines), f"{mapped} results for {len(lines)} lines"

        tracemalloc.start()
        async for _ in client.results(ended):
            pass
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        raw = await _raw_results(client, ended)
        used = cpu()
        for line in raw.splitlines():
            orjson.loads(line)
        floor_cpu = cpu() - used
        return {
            "submit_s": submit_s,
            "submit_cpu": submit_cpu,
            "map_s": map_s,
            "map_cpu": map_cpu,
            "peak_mib": peak / 2**20,
            "floor_cpu": floor_cpu,
            "result_mib": len(raw) / 2**20,
        }
    finally:
        await upstream.close()


async def _raw_results(client: Any, ended: ProviderBatch) -> bytes:
    """The result bytes as the provider serves them (what the floor parses)."""
    if isinstance(client, OpenAIBatchAPI):
        polled = orjson.loads(await client._call("GET", f"/v1/batches/{ended.id}"))
        return bytes(await client._call("GET", f"/v1/files/{polled['output_file_id']}/content"))
    return bytes(await client._call("GET", f"{client._base}/v1/messages/batches/{ended.id}/results"))


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--item-bytes", type=int, default=1024)
    parser.add_argument("--apis", default="openai,anthropic")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--engine", action="store_true", help="also the whole batch through relay serve")
    parser.add_argument("--engine-items", type=int, default=50_000)
    parser.add_argument("--clients", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()

    rows = []
    with Processes() as procs:
        _, base_url = start_fake_upstream(procs)
        if args.engine:
            with tempfile.TemporaryDirectory(prefix="offload-bench-") as tmp:
                engine = engine_rows(procs, base_url, Path(tmp), args.engine_items, args.item_bytes)
            print(markdown_table(ENGINE_HEADERS, engine, [False] + [True] * 7))
            print()
        for api in args.apis.split(",") if args.clients else []:
            lines = bodies(api, args.items, args.item_bytes)
            runs = [asyncio.run(one_run(api, base_url, lines)) for _ in range(args.runs)]

            def col(name: str, runs: list[dict[str, float]] = runs) -> list[float]:
                return [r[name] for r in runs]

            rows.append(
                [
                    api,
                    f"{args.items}",
                    f"{median(col('submit_s')):.2f} s",
                    f"{median(col('submit_cpu')):.2f} s",
                    f"{median(col('map_cpu')):.2f} s",
                    f"{median(col('floor_cpu')):.2f} s",
                    f"{median(col('submit_cpu')) + median(col('map_cpu')):.2f} s",
                    f"{median(col('peak_mib')):.0f} MiB",
                    f"{median(col('result_mib')):.0f} MiB",
                ]
            )
    headers = [
        "API",
        "items",
        "submit (wall)",
        "submit CPU",
        "map CPU",
        "floor: orjson.loads",
        "Relay CPU",
        "peak while mapping",
        "results size",
    ]
    print(markdown_table(headers, rows, [False] + [True] * 8))


if __name__ == "__main__":
    main()
