"""What every ``relay`` client command shares: one-line errors, tables that also suit pipes, and the
admin's client of the control plane.

Kept apart from ``relay.cli.main`` so the command groups in their own modules (``relay.cli.batch``) use the
same conventions without importing the whole command tree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from relay.config import load_client_settings

out = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 1) -> NoReturn:
    # Plain print: one line whatever the terminal width, and no markup parsing of the message.
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def print_table(headers: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """A table for people on a terminal; tab-separated lines (header first) for pipes and scripts."""
    if sys.stdout.isatty():
        table = Table(*headers, title=title)
        for row in rows:
            table.add_row(*row)
        out.print(table)
        return
    if title:
        err.print(title)
    for row in [headers, *rows]:
        print("\t".join(row))


def admin_client() -> httpx.Client:
    """The control plane at ``RELAY_CONTROL_URL`` with ``RELAY_ADMIN_TOKEN`` (or the embedded
    ``relay-data/admin.token``, so a local demo needs no setup)."""
    client = load_client_settings()
    token = client.admin_token.get_secret_value() if client.admin_token else None
    if token is None:
        path = Path(client.data_dir) / "admin.token"
        if path.exists():
            token = path.read_text().strip()
    if not token:
        fail("RELAY_ADMIN_TOKEN is not set (and no relay-data/admin.token here)")
    return httpx.Client(base_url=client.control_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def admin_call(
    method: str,
    path: str,
    body: Any = None,
    params: dict[str, Any] | None = None,
    *,
    explain: Callable[[str], str] = str,
) -> Any:
    """One control-plane call; an HTTP error or an unreachable plane is a one-line :func:`fail`, an
    error answer's message passed through ``explain`` (``relay apply`` points ``documents[i]`` at the
    file's line)."""
    with admin_client() as http:
        try:
            response = http.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            fail(f"cannot reach the control plane at {http.base_url}: {exc}")
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        message = (data or {}).get("error", {}).get("message") if isinstance(data, dict) else None
        fail(explain(f"{response.status_code}: {message or response.text}"))
    return data
