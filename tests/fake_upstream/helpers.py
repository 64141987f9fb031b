"""Test helpers: a strict SSE parser, so stream tests see exactly the events on the wire."""

from __future__ import annotations

from typing import Any

import orjson

OPENAI_AUTH = {"authorization": "Bearer sk-test"}
ANTHROPIC_AUTH = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}


def parse_sse(text: str) -> list[tuple[str | None, Any]]:
    """``[(event name or None, parsed data or the raw "[DONE]")]``; every event must end with a blank line."""
    assert text.endswith("\n\n"), "stream must end with a complete event"
    events: list[tuple[str | None, Any]] = []
    for block in text[:-2].split("\n\n"):
        name: str | None = None
        data: str | None = None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value
            else:
                raise AssertionError(f"unexpected SSE line {line!r}")
        assert data is not None
        events.append((name, data if data == "[DONE]" else orjson.loads(data)))
    return events
