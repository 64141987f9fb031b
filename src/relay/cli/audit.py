"""``relay audit export`` and ``relay audit verify``: the control plane's audit log (SPEC §21), over the
control API (``RELAY_CONTROL_URL``, ``RELAY_ADMIN_TOKEN``).

Why export goes through the API rather than the database: it works against any deployment the
operator can reach, with the admin token alone, and writes exactly the objects ``GET /api/audit``
shows (so the hashes can be recomputed from the file). The API pages newest first; the export is
oldest first (a chain reads forward), so pages are spooled to a temporary file and written back in
reverse: memory holds one page, whatever the log's size.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import IO

import typer

from relay.cli.support import admin_call, err, fail

audit_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="The audit log (export, verify), over the control API (RELAY_CONTROL_URL).",
)
PAGE = 1000


@audit_app.command("export")
def audit_export(
    output: Path | None = typer.Option(None, "-o", "--output", help="File to write (default stdout)"),
) -> None:
    """Write every audit entry as JSON Lines, oldest first, as GET /api/audit shows them."""
    with tempfile.TemporaryFile("w+b") as spool:
        offsets = _spool(spool)
        if output is None:
            count = _write_reversed(spool, offsets, sys.stdout.buffer)
            sys.stdout.flush()
        else:
            with output.open("wb") as target:
                count = _write_reversed(spool, offsets, target)
            err.print(f"wrote {count} audit entries to {output}")


@audit_app.command("verify")
def audit_verify() -> None:
    """Recompute the hash chain on the server; exit 1 naming the first bad entry if it is broken."""
    verdict = admin_call("GET", "/api/audit/verify")
    if not verdict["ok"]:
        fail(f"audit chain broken at entry {verdict['first_bad']} ({verdict['entries']} entries)")
    print(f"audit chain ok: {verdict['entries']} entries")


def _spool(spool: IO[bytes]) -> list[int]:
    """Every page, newest first, one JSON line per entry; the offset where each line starts."""
    offsets: list[int] = []
    cursor: str | None = None
    while True:
        params = {"limit": PAGE, **({"cursor": cursor} if cursor else {})}
        page = admin_call("GET", "/api/audit", params=params)
        for entry in page["items"]:
            offsets.append(spool.tell())
            line = json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n"
            spool.write(line.encode())
        cursor = page.get("next_cursor")
        if not cursor:
            return offsets


def _write_reversed(spool: IO[bytes], offsets: list[int], target: IO[bytes]) -> int:
    for offset in reversed(offsets):
        spool.seek(offset)
        target.write(spool.readline())
    return len(offsets)
