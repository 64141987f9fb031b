"""The batch APIs of SPEC §14 and §15 next to the native one (§10), and completion webhook latency
(§10.10): the phases ``upload``, ``apis`` and ``webhook`` of ``batch_throughput.py`` (SPEC §13).

It knows the three batch APIs' wire shapes (submit, poll until finished) and nothing of Relay's
internals: every figure comes from HTTP answers, the usage events (``GET /api/usage/events?batch_id=``)
and ``/proc``. It reuses the relay processes, databases, bodies and table rows of
``batch_throughput.py`` (which puts itself in ``sys.modules`` as ``batch_throughput`` before importing
this module, so both share one ``STORE``).

4. **Upload** (§14; relay with ``RELAY_BATCH_WORKERS=0``, fresh per run): a ``--submit-items`` (50 000)
   line OpenAI-format JSONL file (≈ 55 MB, written to disk first) streamed to ``POST /openai/v1/files``
   (multipart), then ``POST /openai/v1/batches``; wall time from the first byte of the upload to the
   create's answer, then to the batch leaving ``validating`` (every line checked, its items queued);
   the relay's peak RSS (``VmHWM``) after that.
5. **APIs at 0 ms** (``--workers0`` workers, one relay for all): a ``--items`` batch through each of
   ``--apis`` (native ``/v1/batches``, ``openai`` = §14, ``anthropic`` = §15 with the ``bench-claude``
   model bound with the anthropic adapter), interleaved (the order rotated per run), the same bodies;
   items/s as phase 2 (usage events: first start → last end), relay CPU ms/item (submit → finished).
   Target: each within 10 % of the native figure of the same run.
6. **Webhook** (a ``Webhook`` created through ``POST /api/webhooks`` pointing at a receiver on loopback
   in this process, which answers 204 and notes the wall clock of each event): a ``--webhook-items``
   batch per API per run; latency = the receiver's clock at the event − the last item's end (the latest
   usage event ``ts``), and − the batch's own end time where its API gives one to the millisecond.
   Target ≤ 2 s.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson

from batch_throughput import (
    POLL_S,
    TARGET_ITEMS_PER_S,
    TARGET_SUBMIT_S,
    Databases,
    Row,
    Series,
    batch_events,
    item_body,
    parse_ts,
    relay_process,
    rss_row,
    say,
    set_latency,
    verdict,
)
from common import CpuMeter, Processes, cpu_seconds, proc_status_mib
from live_overhead import TRANSLATED_MODEL, Relay, relay_admin

APIS = ("native", "openai", "anthropic")
TARGET_SHARE_OF_NATIVE = 0.90
TARGET_WEBHOOK_S = 2.0
ENDPOINT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}

# ------------------------------------------------------------------------------------------ bodies


def openai_line(idx: int, size: int) -> bytes:
    line = {"custom_id": f"req-{idx}", "method": "POST", "url": ENDPOINT, "body": item_body(idx, size)}
    return orjson.dumps(line) + b"\n"


def anthropic_request(idx: int, size: int) -> dict[str, Any]:
    return {"custom_id": f"req-{idx}", "params": {**item_body(idx, size), "model": TRANSLATED_MODEL}}


# ------------------------------------------------------------------------------------------ the APIs


def bearer(key: str) -> dict[str, str]:
    """Only the credential: a client-wide Content-Type would replace the multipart one of an upload."""
    return {"Authorization": f"Bearer {key}"}


def upload_file(client: httpx.Client, relay: Relay, content: Any, name: str = "batch.jsonl") -> str:
    """``POST /openai/v1/files`` (multipart, ``purpose=batch``); ``content`` bytes or an open file."""
    answer = client.post(
        relay.base_url + "/openai/v1/files",
        files={"file": (name, content, "application/jsonl")},
        data={"purpose": "batch"},
    )
    if answer.status_code != 200:
        raise RuntimeError(f"file upload answered {answer.status_code}: {answer.text[:300]}")
    return str(answer.json()["id"])


def create_openai(client: httpx.Client, relay: Relay, file_id: str) -> dict[str, Any]:
    body = {"input_file_id": file_id, "endpoint": ENDPOINT, "completion_window": "24h"}
    answer = client.post(relay.base_url + "/openai/v1/batches", json=body)
    if answer.status_code != 200:
        raise RuntimeError(f"batch create answered {answer.status_code}: {answer.text[:300]}")
    return dict(answer.json())


def submit(api: str, client: httpx.Client, relay: Relay, n: int, size: int) -> str:
    """Create an ``n``-item batch through ``api``; its id (the one its usage events carry)."""
    if api == "native":
        body = orjson.dumps({"shape": "openai", "requests": [item_body(i, size) for i in range(n)]})
        answer = client.post(relay.base_url + "/v1/batches", content=body, headers=JSON)
        expected = 202
    elif api == "openai":
        file_id = upload_file(client, relay, b"".join(openai_line(i, size) for i in range(n)))
        return str(create_openai(client, relay, file_id)["id"])
    else:
        body = orjson.dumps({"requests": [anthropic_request(i, size) for i in range(n)]})
        answer = client.post(relay.base_url + "/anthropic/v1/messages/batches", content=body, headers=JSON)
        expected = 200
    if answer.status_code != expected:
        raise RuntimeError(f"{api} submit answered {answer.status_code}: {answer.text[:300]}")
    return str(answer.json()["id"])


def finished(api: str, client: httpx.Client, relay: Relay, batch_id: str) -> datetime | None:
    """The batch's end time when it has finished (None while it runs); the §14 one has whole seconds."""
    if api == "native":
        value = client.get(f"{relay.base_url}/v1/batches/{batch_id}").json()["CompletedAt"]
        return None if value is None else parse_ts(value)
    if api == "openai":
        status = client.get(f"{relay.base_url}/openai/v1/batches/{batch_id}").json()
        if status["status"] in ("validating", "in_progress", "finalizing", "cancelling"):
            return None
        end = next(
            status[k] for k in ("completed_at", "failed_at", "cancelled_at", "expired_at") if status[k]
        )
        return datetime.fromtimestamp(end).astimezone()
    status = client.get(f"{relay.base_url}/anthropic/v1/messages/batches/{batch_id}").json()
    return None if status["processing_status"] != "ended" else parse_ts(status["ended_at"])


def item_span(events: Sequence[dict[str, Any]]) -> tuple[int, float, datetime | None]:
    """(completed items, first start → last end in s, last end) from a batch's usage events."""
    done = [e for e in events if e["error_kind"] is None and 200 <= (e["status"] or 0) < 300]
    if not done:
        return 0, 0.0, None
    ends = [parse_ts(e["ts"]) for e in done]
    first = min(end.timestamp() - (e["latency_ms"] or 0) / 1000 for end, e in zip(ends, done, strict=True))
    return len(done), max(ends).timestamp() - first, max(ends)


def wait_events(relay: Relay, batch_id: str, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The batch's usage events once all ``n`` are readable (the writer may lag its end a little)."""
    deadline = time.monotonic() + timeout
    while len(events := batch_events(relay, batch_id)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    return events


# ------------------------------------------------------------------------------------------ phases


def phase_upload(
    args: argparse.Namespace, procs: Processes, dbs: Databases, tmp: Path, upstream: str, rows: list[Row]
) -> None:
    n = args.submit_items
    path = tmp / "upload.jsonl"
    with path.open("wb") as out:
        for i in range(n):
            out.write(openai_line(i, args.item_bytes))
    mb = path.stat().st_size / 1e6
    say(f"\n4. §14 upload: {n:,} lines, {mb:.1f} MB file, relay with RELAY_BATCH_WORKERS=0 (fresh per run)")
    total, to_valid, up_s, hwm, idle, cpu = (Series() for _ in range(6))
    for run in range(args.runs):
        with relay_process(procs, dbs, tmp, f"upload{run}", 0, upstream) as (relay, key):
            pid = relay.process.pid
            idle.add(proc_status_mib(pid, "VmHWM"))
            meter = CpuMeter({"relay": pid})
            with httpx.Client(timeout=300, headers=bearer(key)) as client, path.open("rb") as fh:
                meter.start()
                started = time.perf_counter()
                file_id = upload_file(client, relay, fh)
                uploaded = time.perf_counter() - started
                batch = create_openai(client, relay, file_id)
                created = time.perf_counter() - started
                url = f"{relay.base_url}/openai/v1/batches/{batch['id']}"
                while (status := client.get(url).json())["status"] == "validating":
                    if time.perf_counter() - started > 300:
                        raise RuntimeError("the §14 batch still validating after 300 s")
                    time.sleep(0.05)
                validated = time.perf_counter() - started
                meter.stop()
            if status["status"] != "in_progress" or status["request_counts"]["total"] != n:
                raise RuntimeError(f"after validation: {status['status']}, {status['request_counts']}")
            peak = proc_status_mib(pid, "VmHWM")
        total.add(created, meter.others_cores)
        to_valid.add(validated)
        up_s.add(uploaded)
        hwm.add(peak)
        cpu.add(meter.seconds["relay"])
        say(
            f"   run {run + 1}: upload {uploaded:.2f} s, + create → {created:.2f} s, validated (in_progress, "
            f"{n:,} items) at {validated:.2f} s; relay CPU {meter.seconds['relay']:.2f} s, peak RSS "
            f"{peak:.0f} MiB (after boot {idle.values[-1]:.0f}); others {meter.others_cores:.2f} cores"
        )
    rows.append(
        Row(
            "§14 upload",
            f"{n:,} lines ({mb:.0f} MB): upload + create",
            total.fmt(".2f", " s")
            + f"; in_progress at {to_valid.fmt('.2f', ' s')}; CPU {cpu.fmt('.2f', ' s')}",
            f"the upload alone {up_s.fmt('.2f', ' s')}",
            f"< {TARGET_SUBMIT_S:g} s",
            verdict(total.median < TARGET_SUBMIT_S),
            total.others_fmt(),
        )
    )
    rows.append(rss_row("§14 upload", hwm, f"relay after boot {idle.fmt(',.0f', ' MiB')}"))


def run_api_batch(
    api: str, relay: Relay, key: str, n: int, size: int, pids: dict[str, int], max_seconds: float
) -> tuple[float, float, int, float]:
    """One batch through ``api`` until it finished: (items/s, relay CPU ms/item, completed, others)."""
    meter = CpuMeter(pids)
    with httpx.Client(timeout=120, headers=bearer(key)) as client:
        meter.start()
        cpu0 = cpu_seconds(pids["relay"])
        batch_id = submit(api, client, relay, n, size)
        deadline = time.monotonic() + max_seconds + 120
        while finished(api, client, relay, batch_id) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{api} batch {batch_id} not finished after {max_seconds + 120:g} s")
            time.sleep(POLL_S)
        relay_cpu = cpu_seconds(pids["relay"]) - cpu0
        meter.stop()
    completed, span, _ = item_span(wait_events(relay, batch_id, n))
    return (completed / span if span > 0 else 0.0), relay_cpu * 1000 / n, completed, meter.others_cores


def phase_apis(
    args: argparse.Namespace,
    procs: Processes,
    dbs: Databases,
    tmp: Path,
    upstream: str,
    fake_pid: int,
    rows: list[Row],
) -> None:
    n, workers = args.items, args.workers0
    say(f"\n5. the batch APIs at 0 ms: {n:,} items each ({', '.join(args.api_list)}), {workers} workers")
    set_latency(upstream, 0)
    rate = {api: Series() for api in args.api_list}
    cpu = {api: Series() for api in args.api_list}
    with relay_process(procs, dbs, tmp, "apis", workers, upstream) as (relay, key):
        pids = {"relay": relay.process.pid, "upstream": fake_pid}
        for run in range(args.runs):
            parts = []
            order = args.api_list[run % len(args.api_list) :] + args.api_list[: run % len(args.api_list)]
            for api in order:  # rotated per run: no API always runs first on a fresh database
                r, c, completed, others = run_api_batch(
                    api, relay, key, n, args.item_bytes, pids, args.max_seconds
                )
                rate[api].add(r, others)
                cpu[api].add(c)
                parts.append(
                    f"{api} {r:,.0f} items/s ({completed:,} done, {c:.2f} ms CPU/item, others {others:.2f})"
                )
            say(f"   run {run + 1}: " + " | ".join(parts))
    native = rate.get("native")
    for api in args.api_list:
        measured = f"{rate[api].fmt(',.0f')}; relay CPU {cpu[api].fmt('.2f', ' ms')}/item"
        if api == "native" or native is None:
            rows.append(
                Row(
                    "0 ms APIs",
                    f"{api}: {n:,} items, {workers} workers",
                    measured,
                    "–",
                    f"≥ {TARGET_ITEMS_PER_S:g} items/s",
                    verdict(rate[api].median >= TARGET_ITEMS_PER_S),
                    rate[api].others_fmt(),
                )
            )
            continue
        share = 100 * rate[api].median / native.median if native.median else 0.0
        rows.append(
            Row(
                "0 ms APIs",
                f"{api}: {n:,} items, {workers} workers",
                measured + f" = {share:.0f} % of native",
                f"native same run {native.fmt(',.0f')} items/s",
                f"≥ {TARGET_SHARE_OF_NATIVE * 100:.0f} % of native",
                verdict(share >= TARGET_SHARE_OF_NATIVE * 100),
                rate[api].others_fmt(),
            )
        )


class Receiver:
    """A webhook receiver on 127.0.0.1 (a thread of this process): answers 204, notes each event's
    arrival (wall clock) by the batch id of its ``data``."""

    def __init__(self) -> None:
        arrivals: dict[str, tuple[float, str]] = {}
        self.arrivals = arrivals

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                now = time.time()
                event = orjson.loads(body)
                arrivals.setdefault(event["data"]["id"], (now, event["type"]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, batch_id: str, timeout: float) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while batch_id not in self.arrivals:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no webhook event for {batch_id} within {timeout:g} s")
            time.sleep(0.01)
        return self.arrivals[batch_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def phase_webhook(
    args: argparse.Namespace, procs: Processes, dbs: Databases, tmp: Path, upstream: str, rows: list[Row]
) -> None:
    n, workers = args.webhook_items, args.workers0
    say(
        f"\n6. webhook latency: a {n:,}-item batch per API ({', '.join(args.api_list)}) per run, "
        f"{workers} workers"
    )
    set_latency(upstream, 0)
    after_item = {api: Series() for api in args.api_list}
    after_end = {api: Series() for api in args.api_list}
    receiver = Receiver()
    try:
        with relay_process(procs, dbs, tmp, "webhook", workers, upstream) as (relay, key):
            hook = {"name": "bench-hook", "url": receiver.url}
            made = httpx.post(
                relay.control_url + "/api/webhooks", json=hook, headers=relay_admin(relay), timeout=10
            )
            if made.status_code != 201:
                raise RuntimeError(f"POST /api/webhooks answered {made.status_code}: {made.text[:300]}")
            with httpx.Client(timeout=120, headers=bearer(key)) as client:
                for run in range(args.runs):
                    parts = []
                    for api in args.api_list:
                        batch_id = submit(api, client, relay, n, args.item_bytes)
                        arrived, kind = receiver.wait(batch_id, args.max_seconds + 120)
                        end = finished(api, client, relay, batch_id)
                        _, _, last = item_span(wait_events(relay, batch_id, n))
                        if last is None or end is None:
                            raise RuntimeError(f"{api} batch {batch_id}: no completed item or no end time")
                        after_item[api].add(arrived - last.timestamp())
                        if api != "openai":  # §14 times are whole seconds
                            after_end[api].add(arrived - end.timestamp())
                        parts.append(f"{api} {kind} {arrived - last.timestamp():.3f} s after the last item")
                    say(f"   run {run + 1}: " + " | ".join(parts))
    finally:
        receiver.close()
    for api in args.api_list:
        rows.append(
            Row(
                "webhook",
                f"{api}: {n:,} items, event after the last item",
                after_item[api].fmt(".3f", " s"),
                "–"
                if not after_end[api].values
                else f"after the batch's end time {after_end[api].fmt('.3f', ' s')}",
                f"≤ {TARGET_WEBHOOK_S:g} s",
                verdict(after_item[api].median <= TARGET_WEBHOOK_S),
                "–",
            )
        )
