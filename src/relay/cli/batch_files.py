"""The input files of ``relay batch submit``: which format a file is, and its requests, checked before
anything is sent (SPEC §10.9, §14, §15).

What it does. :func:`read_batch_file` reads JSONL (one body per line, blank lines skipped) or a JSON
array; :func:`message_batch_format` tells Anthropic Message Batches lines from plain Messages bodies;
:func:`openai_format` detects an OpenAI-format JSONL and checks its lines as the server would;
:func:`with_lines` names a server's ``requests[i]`` by the file's line. A file is one format, never a
mix: a mix fails naming the first line that differs.

What it deliberately does not know. HTTP and the commands (``relay.cli.batch``). Every refusal is
:func:`relay.cli.support.fail` (exit 1, the message on stderr).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from relay.cli.support import fail
from relay.domain.openai_batches import ENDPOINT_SHAPES, LineChecker


def read_batch_file(path: Path) -> tuple[list[Any], list[int] | None]:
    """The requests of a JSONL file (one body per line, blank lines skipped) or a JSON array, and for
    JSONL each request's line number, so problems are named ``line 3 (requests[2])``."""
    if not path.is_file():
        fail(f"{path}: no such file")
    text = path.read_text()
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            fail(f"{path}: not a JSON array: {exc}")
        if not isinstance(items, list) or not items:
            fail(f"{path}: not a JSON array of requests")
        return items, None
    items, lines = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            fail(f"{path}: line {number} (requests[{len(items)}]) is not JSON: {exc}")
        lines.append(number)
    if not items:
        fail(f"{path}: no requests")
    return items, lines


def message_batch_format(path: Path, requests: list[Any]) -> bool:
    """True when every line is an Anthropic Message Batches request (``{"custom_id", "params"}``),
    False when none is (plain Messages bodies); a file mixing both is refused, naming the first line
    that differs from the first one. Decided per file, for ``--shape anthropic`` only."""
    kinds = [isinstance(r, dict) and "custom_id" in r and "params" in r for r in requests]
    if all(kinds) or not any(kinds):
        return kinds[0]
    odd = kinds.index(not kinds[0])
    fail(
        f"{path}: requests[{odd}] mixes formats: every line must be either a Messages request body or "
        'an Anthropic batch request ({"custom_id", "params"})'
    )


def with_lines(message: str, lines: list[int] | None) -> str:
    """``requests[2]: …`` from the server becomes ``line 3 (requests[2]): …`` for a JSONL file."""
    if lines is None:
        return message

    def name(match: re.Match[str]) -> str:
        index = int(match.group(1))
        return f"line {lines[index]} ({match.group(0)})" if index < len(lines) else match.group(0)

    return re.sub(r"requests\[(\d+)\]", name, message)


def openai_format(path: Path) -> str | None:
    """The endpoint of an OpenAI-format JSONL file (its lines checked as SPEC §14 does), or None for a
    file of plain request bodies; a mix of the two formats, or a bad OpenAI line, fails naming the line."""
    if not path.is_file():
        fail(f"{path}: no such file")
    raw_lines = path.read_bytes().splitlines()
    first: tuple[int, dict[str, Any]] | None = None
    for number, raw in enumerate(raw_lines, start=1):
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except ValueError:
                return None  # a JSON array or a bad line: read_batch_file names it
            if isinstance(parsed, dict):
                first = (number, parsed)
            break
    if first is None or not _is_openai_object(first[1]):
        for number, raw in enumerate(raw_lines, start=1):
            if b'"custom_id"' in raw and _is_openai_line(raw):
                fail(
                    f"{path}: line {number} is an OpenAI batch line (custom_id) but the first line is a "
                    "request body: a file holds request bodies or OpenAI batch lines, not both"
                )
        return None
    endpoint = first[1].get("url")
    if endpoint not in ENDPOINT_SHAPES:
        fail(f"{path}: line {first[0]}: url must be one of {', '.join(ENDPOINT_SHAPES)}")
    checker = LineChecker(str(endpoint), max_items=10**9)
    for number, raw in enumerate(raw_lines, start=1):
        if raw.strip() and not _is_openai_line(raw):
            fail(
                f"{path}: line {number} is a request body but line {first[0]} is an OpenAI batch line "
                "(custom_id, method, url, body): a file holds one format, not a mix"
            )
        checker.feed(raw)
    problems = checker.errors()
    if problems:
        p = problems[0]
        where = f"line {p['line']}" if p["line"] is not None else "file"
        fail(f"{path}: {where}: {p['message']}" + (f" ({p['param']})" if p["param"] else ""))
    return str(endpoint)


def _is_openai_line(raw: bytes) -> bool:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return True  # not JSON: the OpenAI checker names it
    return _is_openai_object(parsed)


def _is_openai_object(value: Any) -> bool:
    """An OpenAI batch line has a ``custom_id`` (an Anthropic one, ``custom_id`` + ``params``, is not)."""
    return isinstance(value, dict) and "custom_id" in value and "params" not in value
