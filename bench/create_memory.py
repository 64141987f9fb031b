"""How much memory does parsing a big Anthropic Message Batches create take? (SPEC §17 "Scale", §15.)

Writes a ``--items`` (200 000) request create body (``{"requests": [{"custom_id", "params"}, …]}``,
about ``--item-bytes`` per request) to a temporary file, then in a fresh process per mode reads and
checks it as the create does, turning each request's ``params`` into the JSON bytes a payload store
writes (and dropping them, as a store does once written), and reports the process's peak RSS
(``ru_maxrss``) above its RSS before reading:

- ``whole``: the body read whole (a create under 1 MiB), parsed and checked with ``validate_create``;
- ``streamed``: the body read from its spool file by ``StreamedCreate`` (a create over 1 MiB).

It measures the parse, not the HTTP path or the database writes (the same in both). A benchmark, not a
test: it prints and exits 0.

    .venv/bin/python bench/create_memory.py [--items 200000] [--item-bytes 300]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def child(mode: str, path: Path, items: int) -> None:
    from relay.batch_apis.anthropic_create import StreamedCreate, validate_create

    before = rss_mib()
    count = 0
    if mode == "whole":
        raw = path.read_bytes()
        params, custom_ids = validate_create(orjson.loads(raw), items)
        for p in params:
            orjson.dumps(p)
            count += 1
    else:
        with path.open("rb") as source:
            create = StreamedCreate(source, items, 64)
            for _body in create:
                count += 1
            custom_ids = create.custom_ids
    assert count == items == len(custom_ids)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"before_mib": before, "peak_mib": peak}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--item-bytes", type=int, default=300)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.items)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "create.json"
        pad = "x" * max(0, args.item_bytes - 150)
        with path.open("wb") as out:
            out.write(b'{"requests": [')
            for i in range(args.items):
                request = {
                    "custom_id": f"req-{i}",
                    "params": {
                        "model": "bench-claude",
                        "max_tokens": 16,
                        "messages": [{"role": "user", "content": f"request {i} {pad}"}],
                    },
                }
                out.write((b"," if i else b"") + orjson.dumps(request))
            out.write(b"]}")
        size = path.stat().st_size / 1e6
        print(f"{args.items:,} requests, {size:.1f} MB body")
        for mode in ("whole", "streamed"):
            out = subprocess.run(
                [sys.executable, __file__, "--items", str(args.items), "--child", mode, str(path)],
                check=True,
                capture_output=True,
                text=True,
                env=os.environ,
            ).stdout
            got = json.loads(out.strip().splitlines()[-1])
            above = got["peak_mib"] - got["before_mib"]
            print(f"{mode:9s} peak RSS {got['peak_mib']:.0f} MiB, {above:.0f} MiB above the start")


if __name__ == "__main__":
    main()
