"""The §14 create's input file read line by line (``relay.batch_apis.openai_create``): over chunks cut
anywhere — mid-line, mid-character, a byte at a time — the streamed read yields the bodies and
custom_ids a whole read of the same file gives, refuses where a whole read finds errors, and after
``check_rest`` reports exactly the whole read's errors (line numbers included)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator

import pytest

from relay.batch_apis.openai_create import ChunkReader, LinesRefused, StreamedLines
from relay.domain.openai_batches import LineChecker

CHAT = "/v1/chat/completions"


def good(i: int, pad: str = "") -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": f"ünï {i} {pad}"}]}
    return json.dumps({"custom_id": f"c{i}", "method": "POST", "url": CHAT, "body": body}).encode()


def whole(content: bytes, max_items: int) -> tuple[list[bytes], list[str], list[dict[str, object]]]:
    """The whole-file read: ``FileService.lines``' split, every line fed to one checker."""
    parts = content.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    checker = LineChecker(CHAT, max_items)
    bodies = [body for raw in parts if (body := checker.feed(raw)) is not None]
    return bodies, checker.custom_ids, checker.errors()


async def cut(content: bytes, sizes: list[int]) -> AsyncIterator[bytes]:
    """``content`` in chunks of the given sizes, cycled."""
    at, turn = 0, 0
    while at < len(content):
        size = sizes[turn % len(sizes)]
        yield content[at : at + size]
        at, turn = at + size, turn + 1
        await asyncio.sleep(0)


async def streamed(
    content: bytes, sizes: list[int], max_items: int, buffer: int
) -> tuple[list[bytes], list[str], list[dict[str, object]], bool]:
    reader = ChunkReader(cut(content, sizes))
    lines = StreamedLines(io.BufferedReader(reader, buffer), LineChecker(CHAT, max_items), "openai")
    got: list[bytes] = []

    def consume() -> bool:  # in a worker thread, as a payload store consumes it
        try:
            got.extend(lines)
        except LinesRefused:
            lines.check_rest()
            return True
        return False

    try:
        refused = await asyncio.to_thread(consume)
    finally:
        await reader.aclose()
    return got, lines.custom_ids, lines.checker.errors(), refused


CONTENTS = {
    "plain": b"\n".join(good(i, "x" * (i % 50)) for i in range(300)) + b"\n",
    "no-final-newline": b"\n".join(good(i) for i in range(40)),
    "blank-and-crlf": b"\n".join([good(0), b"", b"  ", good(1) + b"\r", good(2)]) + b"\n\n",
    "bad-near-end": b"\n".join([*(good(i) for i in range(200)), b"{", good(3), good(201)]) + b"\n",
    "errors-throughout": b"\n".join(
        good(i) if i % 7 else json.dumps({"custom_id": f"c{i}", "method": "GET"}).encode() for i in range(120)
    ),
    "too-many": b"\n".join([b"{", *(good(i) for i in range(60))]),
    "empty": b"",
    "only-blank": b"\n  \n\n",
}


@pytest.mark.parametrize("name", list(CONTENTS))
@pytest.mark.parametrize(("sizes", "buffer"), [([3, 1, 17, 64], 8), ([7, 1, 1013], 64), ([1 << 20], 1 << 20)])
async def test_a_streamed_read_is_a_whole_read(name: str, sizes: list[int], buffer: int) -> None:
    content = CONTENTS[name]
    max_items = 50
    bodies, custom_ids, errors = whole(content, max_items)
    got, got_ids, got_errors, refused = await streamed(content, sizes, max_items, buffer)
    assert got_errors == errors
    assert refused == bool(errors)
    if not errors:
        assert got == bodies and got_ids == custom_ids
    else:  # the write stopped at the first bad line: only valid lines before it were handed on
        assert got == bodies[: len(got)]


async def test_the_reader_refuses_the_event_loop_thread() -> None:
    reader = ChunkReader(cut(b"a\n", [1]))
    with pytest.raises(RuntimeError, match="worker thread"):
        reader.read(1)
    await reader.aclose()
    with pytest.raises(ValueError, match="released"):
        await asyncio.to_thread(reader.read, 1)
