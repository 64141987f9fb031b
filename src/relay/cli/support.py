"""What every ``relay`` client command shares: one-line errors and tables that also suit pipes.

Kept apart from ``relay.cli.main`` so the command groups in their own modules (``relay.cli.batch``) use the
same conventions without importing the whole command tree.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.table import Table

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
