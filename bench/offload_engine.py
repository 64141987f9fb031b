"""The engine side of provider batch offload (SPEC §22), for ``bench/offload_batch.py --engine``: one
``relay serve`` (SQLite, 16 workers, ``RELAY_OFFLOAD_POLL_S=0.5``) against the fake upstream, a
``--items`` §15 Message Batch (``POST /anthropic/v1/messages/batches``) to a binding whose
``batch_offload`` is ``native``, and the same batch to a twin binding Relay runs itself (the baseline,
same run, same bodies). For each: the create's wall time, the relay process's CPU from the create to
the batch ``ended`` (/proc), its peak RSS (``VmHWM``) and the wall time to ``ended``. The offloaded
batch's CPU is Relay's whole share: validating and storing the items, reading them back and sending
them, polling, mapping every result into its item with its body and usage event.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from common import Processes, cpu_seconds, proc_status_mib
from live_overhead import PRICING, UPSTREAM_KEY, catalog, mint_key, relay_admin, start_relay

OFFLOADED, TWIN = "bench-claude-offload", "bench-claude-relay"


def engine_catalog(upstream: str) -> list[dict[str, Any]]:
    docs = catalog(upstream)
    for model, offload in ((OFFLOADED, True), (TWIN, False)):
        spec: dict[str, Any] = {"model": model, "host": "fake", "adapter": "anthropic", "pricing": PRICING}
        if offload:
            spec["batch_offload"] = {"mode": "native", "min_items": 100, "discount": 0.5}
        docs += [
            {"kind": "Model", "name": model, "spec": {"provider": "anthropic"}},
            {"kind": "Binding", "name": f"{model}-fake", "spec": spec},
        ]
    return docs


def create_body(model: str, items: int, item_bytes: int) -> bytes:
    pad = "x" * max(0, item_bytes - 120)
    requests = [
        {
            "custom_id": f"r-{n}",
            "params": {
                "model": model,
                "max_tokens": 64,
                "messages": [{"role": "user", "content": f"{n} {pad}"}],
            },
        }
        for n in range(items)
    ]
    return orjson.dumps({"requests": requests})


def run_batch(relay: Any, key: str, body: bytes, timeout_s: float = 1800) -> dict[str, float]:
    pid = relay.process.pid
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    url = relay.base_url + "/anthropic/v1/messages/batches"
    with httpx.Client(timeout=600) as client:
        cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
        created = client.post(url, content=body, headers=headers)
        submit_s = time.perf_counter() - wall0
        if created.status_code != 200:
            raise SystemExit(
                f"create answered {created.status_code}: {created.text[:300]}\n{relay.log_tail()}"
            )
        batch_id = created.json()["id"]
        deadline = time.monotonic() + timeout_s
        while True:
            shown = client.get(f"{url}/{batch_id}", headers=headers).json()
            if shown["processing_status"] == "ended":
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"batch {batch_id} did not end: {shown}")
            time.sleep(0.25)
        ended_s, cpu = time.perf_counter() - wall0, cpu_seconds(pid) - cpu0
        offload = client.get(
            relay.control_url + f"/api/batches/{batch_id}", headers=relay_admin(relay)
        ).json()
    return {
        "submit_s": submit_s,
        "ended_s": ended_s,
        "cpu_s": cpu,
        "hwm_mib": proc_status_mib(pid, "VmHWM"),
        "succeeded": float(shown["request_counts"]["succeeded"]),
        "offloaded": float(bool(offload.get("offloaded"))),
    }


def engine_rows(procs: Processes, upstream: str, tmp: Path, items: int, item_bytes: int) -> list[list[str]]:
    """One relay per kind (a fresh process each, so each peak RSS is its own batch's)."""
    rows = []
    for label, model in (("offloaded", OFFLOADED), ("gateway-run (baseline)", TWIN)):
        relay = start_relay(
            procs,
            tmp / label.split()[0],
            extra_env={"RELAY_BATCH_WORKERS": "16", "RELAY_OFFLOAD_POLL_S": "0.5"},
        )
        try:
            with httpx.Client(timeout=30, headers=relay_admin(relay)) as client:
                applied = client.post(
                    relay.control_url + "/api/apply", json={"documents": engine_catalog(upstream)}
                )
                if applied.status_code != 200:
                    raise SystemExit(f"apply answered {applied.status_code}: {applied.text}")
            key = mint_key(relay)
            idle = proc_status_mib(relay.process.pid, "VmRSS")
            result = run_batch(relay, key, create_body(model, items, item_bytes))
        finally:
            procs.stop(relay.process, timeout=40)
        assert result["succeeded"] == items, result
        assert result["offloaded"] == (model == OFFLOADED), result
        rows.append(
            [
                label,
                f"{items}",
                f"{result['submit_s']:.2f} s",
                f"{result['ended_s']:.1f} s",
                f"{result['cpu_s']:.1f} s",
                f"{result['cpu_s'] / items * 1000:.2f} ms",
                f"{idle:.0f} MiB",
                f"{result['hwm_mib']:.0f} MiB",
            ]
        )
    return rows


ENGINE_HEADERS = [
    "§15 batch",
    "items",
    "create (wall)",
    "to ended (wall)",
    "relay CPU",
    "CPU per item",
    "RSS idle",
    "peak RSS",
]
__all__ = ["ENGINE_HEADERS", "UPSTREAM_KEY", "engine_rows"]
