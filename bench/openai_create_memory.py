"""How much memory and time do a big OpenAI-compatible batch's upload, create and download take?
(SPEC §14, §17 "Scale".)

Writes a ``--lines`` (200 000) line OpenAI batch input file (``{"custom_id", "method", "url", "body"}``,
about ``--line-bytes`` (1 KiB) a line: ~210 MB) to disk, then against a fresh ``relay serve`` per
build (SQLite, ``RELAY_BATCH_WORKERS=0`` so no item runs, ``RELAY_BATCH_MAX_BYTES`` and
``RELAY_BATCH_MAX_ITEMS`` raised to fit the file, the ``--store`` payload store) measures, each step
from the relay's peak RSS reset (``/proc/<pid>/clear_refs`` = 5) to its answer:

- **upload**: ``POST /openai/v1/files`` (multipart, the file streamed from disk by httpx);
- **download**: ``GET /openai/v1/files/{id}/content`` of the input file, read a chunk at a time (the
  output and error files are served by the same route);
- **create**: ``POST /openai/v1/batches`` (every line read and checked, its 200 000 items written);

the wall time, the relay's peak RSS (``VmHWM``) during the step, and how far that peak is above the
RSS the step began with (an earlier step's freed memory may stay with the process). Builds: **after** is this
checkout's ``src/``; **before** (with ``--base-rev REV``, e.g. the commit before the streamed create,
or ``--base-src DIR``) is that build's ``src/`` (``git archive``), run in the same invocation, the
same file, the same machine. A benchmark, not a test: it prints and exits 0.

    .venv/bin/python bench/openai_create_memory.py [--lines 200000] [--line-bytes 1024]
        [--store files|database] [--base-rev REV | --base-src DIR]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from common import Processes, machine_line, proc_status_mib, start_fake_upstream
from live_overhead import SRC, configure, start_relay

ENDPOINT = "/v1/chat/completions"
STEPS = ("upload", "download", "create")
HEADER = "| build | " + " | ".join(f"{step} s | {step} peak (+grew) MiB" for step in STEPS) + " |"
ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Step:
    seconds: float
    peak_mib: float  # VmHWM since the reset (the relay's peak RSS during the step)
    grew_mib: float  # that peak above the RSS when the step began


def write_file(path: Path, lines: int, line_bytes: int) -> int:
    pad = "x" * max(0, line_bytes - 190)
    with path.open("wb") as out:
        for i in range(lines):
            body = {"model": "bench-model", "messages": [{"role": "user", "content": f"item {i} {pad}"}]}
            out.write(
                orjson.dumps({"custom_id": f"req-{i}", "method": "POST", "url": ENDPOINT, "body": body})
            )
            out.write(b"\n")
    return path.stat().st_size


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (Linux ≥ 4.0); False when not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def measure(pid: int, action: Callable[[], None]) -> Step:
    reset_peak(pid)
    before = proc_status_mib(pid, "VmRSS")
    started = time.perf_counter()
    action()
    seconds = time.perf_counter() - started
    peak = proc_status_mib(pid, "VmHWM")
    return Step(seconds, peak, peak - before)


def run_build(
    procs: Processes, name: str, src: Path, tmp: Path, upstream: str, path: Path, args: argparse.Namespace
) -> dict[str, Step]:
    size = path.stat().st_size
    env = {
        "RELAY_BATCH_MAX_BYTES": str(size + (1 << 20)),
        "RELAY_BATCH_MAX_ITEMS": str(max(args.lines, 50_000)),
        "RELAY_BATCH_PAYLOAD_STORE": args.store,
    }
    relay = start_relay(procs, tmp / name, extra_env=env, src=src)
    key = configure(relay, upstream)
    pid = relay.process.pid
    time.sleep(1.0)
    idle = proc_status_mib(pid, "VmRSS")
    steps: dict[str, Step] = {}
    found: dict[str, str] = {}
    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(timeout=1800, headers=auth) as client:

        def upload() -> None:
            with path.open("rb") as fh:
                answer = client.post(
                    relay.base_url + "/openai/v1/files",
                    files={"file": ("big.jsonl", fh, "application/jsonl")},
                    data={"purpose": "batch"},
                )
            if answer.status_code != 200:
                raise SystemExit(f"{name}: upload answered {answer.status_code}: {answer.text[:300]}")
            found["file"] = answer.json()["id"]

        def create() -> None:
            body = {"input_file_id": found["file"], "endpoint": ENDPOINT, "completion_window": "24h"}
            answer = client.post(relay.base_url + "/openai/v1/batches", json=body)
            if answer.status_code != 200:
                raise SystemExit(f"{name}: create answered {answer.status_code}: {answer.text[:300]}")
            found["batch"] = answer.json()["id"]

        def download() -> None:
            got = 0
            with client.stream("GET", relay.base_url + f"/openai/v1/files/{found['file']}/content") as answer:
                for chunk in answer.iter_bytes(1 << 20):
                    got += len(chunk)
            if got != size:
                raise SystemExit(f"{name}: downloaded {got} bytes of {size}")

        steps["upload"] = measure(pid, upload)
        steps["download"] = measure(pid, download)  # before the create: its figure is its own
        steps["create"] = measure(pid, create)
        shown = client.get(relay.base_url + f"/openai/v1/batches/{found['batch']}").json()
        if shown["status"] != "in_progress" or shown["request_counts"]["total"] != args.lines:
            raise SystemExit(f"{name}: the batch is {shown['status']} with {shown['request_counts']}")
    procs.stop(relay.process)
    print(f"  {name}: idle RSS {idle:.0f} MiB, done")
    return steps


def base_src(args: argparse.Namespace, tmp: Path) -> Path | None:
    if args.base_src:
        return Path(args.base_src).resolve()
    if not args.base_rev:
        return None
    target = tmp / "base"
    target.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", args.base_rev, "src"],
        check=True,
        capture_output=True,
    ).stdout
    archive_path = tmp / "base.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--line-bytes", type=int, default=1024)
    parser.add_argument("--store", choices=("files", "database"), default="files")
    parser.add_argument("--base-rev", help="also run the build of this git revision (before)")
    parser.add_argument("--base-src", help="also run the build of this src/ directory (before)")
    args = parser.parse_args()
    print(f"OpenAI batch create memory (SPEC §14, §17) — {machine_line()}")
    with tempfile.TemporaryDirectory() as tmp_name, Processes() as procs:
        tmp = Path(tmp_name)
        path = tmp / "big.jsonl"
        size = write_file(path, args.lines, args.line_bytes)
        print(f"  {args.lines:,} lines, {size / 1e6:.0f} MB file, SQLite, payload store {args.store}")
        if not reset_peak(os.getpid()):
            print("  (peak RSS cannot be reset here: each figure is the peak since the relay started)")
        _, upstream = start_fake_upstream(procs)
        builds: list[tuple[str, Path]] = []
        base = base_src(args, tmp)
        if base is not None:
            builds.append((f"before ({args.base_rev or args.base_src})", base))
        builds.append(("after (this checkout)", SRC))
        results = [
            (name, run_build(procs, name.split()[0], src, tmp, upstream, path, args)) for name, src in builds
        ]
    print()
    print(HEADER)
    print("|---|" + "---:|---:|" * len(STEPS))
    for name, steps in results:
        cells = " | ".join(
            f"{steps[k].seconds:.1f} | {steps[k].peak_mib:.0f} (+{steps[k].grew_mib:.0f})" for k in STEPS
        )
        print(f"| {name} | {cells} |")
    print(
        "\npeak: the relay's VmHWM during the step (one process: both planes); +grew: that peak above its"
        " RSS when the step began (memory freed by an earlier step may not go back to the system)"
    )


if __name__ == "__main__":
    main()
