"""The OpenAI Batches create's input file read line by line while its items are written (SPEC §14, §17
"Scale"): a 200 MB, 200 000-line file never sits in memory whole, neither as bytes nor as parsed lines.

What it does. :class:`ChunkReader` turns the file's bytes (an async iterator of chunks from its payload
store) into a blocking binary reader for a worker thread: each read asks the event loop for the next
chunk. :class:`StreamedLines` is an ``ItemStream`` (``relay.batches.submission``) over it: iterating
yields each valid line's request body, checked by the one :class:`LineChecker` of the whole-file rules,
for ``BatchService.create`` to hand to the payload store's ``write_requests`` — the same store call a
native streaming submit and a spooled §15 create make. The first bad line (or one line too many, or an
empty file at the end) raises :class:`LinesRefused` from the iteration, so the store keeps nothing;
:meth:`StreamedLines.check_rest` then reads on without keeping anything, so the failed batch's
``errors`` are exactly those of a whole read (up to ``MAX_ERRORS``, line numbers of the whole file).

What it deliberately does not know. HTTP, the engine's rows, where the file's bytes are stored.

Invariants. Memory holds one read chunk plus the line being checked, and each valid line's
``custom_id`` (the batch's rows need them). Line numbers count every ``\\n``-separated line, blank ones
included, exactly as ``FileService.lines`` splits them. The reader is only ever read from a thread
other than the event loop's (it would wait on itself): reading there raises ``RuntimeError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from collections.abc import AsyncIterator, Iterator
from typing import IO

from relay.domain.openai_batches import LineChecker


class LinesRefused(Exception):
    """The input file fails validation: nothing of it is to be written (the errors are the checker's)."""


class ChunkReader(io.RawIOBase):
    """A blocking, read-only view of ``chunks`` for worker threads; built in the event loop's thread."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        super().__init__()
        self._chunks = chunks
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._rest = memoryview(b"")
        self._eof = False
        self._released = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._released:
            raise ValueError("the file was released")
        if not self._rest and not self._eof:
            if threading.get_ident() == self._loop_thread:
                raise RuntimeError("ChunkReader is read from a worker thread, never the event loop's")
            future = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
            chunk = future.result()
            if chunk is None:
                self._eof = True
            else:
                self._rest = memoryview(chunk)
        size = min(len(buffer), len(self._rest))
        buffer[:size] = self._rest[:size]
        self._rest = self._rest[size:]  # a view: no copy of what is left
        return size

    async def _next(self) -> bytes | None:
        try:
            return await anext(self._chunks)
        except StopAsyncIteration:
            return None

    async def aclose(self) -> None:
        """Release the file (its store's handle or cursor), in the event loop's thread. A thread still
        reading (its create was cancelled) gets ``ValueError`` from its next read."""
        self._released = True
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(
                RuntimeError
            ):  # a read of it is under way: the generator ends with the loop
                await aclose()


class StreamedLines:
    """The input file's valid request bodies, one per line (an ``ItemStream`` of shape ``shape``)."""

    def __init__(self, source: IO[bytes], checker: LineChecker, shape: str) -> None:
        self._source = source
        self.checker = checker
        self._shape = shape

    @property
    def shape(self) -> str:
        return self._shape

    @property
    def custom_ids(self) -> list[str]:
        return self.checker.custom_ids

    def _lines(self) -> Iterator[bytes]:
        while line := self._source.readline():
            yield line[:-1] if line.endswith(b"\n") else line

    def __iter__(self) -> Iterator[bytes]:
        checker = self.checker
        for raw in self._lines():
            body = checker.feed(raw)
            if checker.failed:
                raise LinesRefused()
            if body is not None:
                yield body
        if checker.errors():  # no request at all
            raise LinesRefused()

    def check_rest(self) -> None:
        """After :class:`LinesRefused`: check the lines not read yet (their bodies dropped), so the
        checker's ``errors`` are a whole read's. Stops early once no line can change them."""
        checker = self.checker
        for raw in self._lines():
            if checker.past_limit:
                return
            checker.feed(raw)
