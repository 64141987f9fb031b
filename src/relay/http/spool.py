"""Request bodies too big to hold: read into an anonymous temporary file instead of memory (SPEC §17
"Scale": a million-item batch submit stays under §13's 1 GiB).

What it does. :func:`spool_body` reads a request body within a limit (413 naming the setting past it,
like ``relay.http.wire.read_body``): a body of at most ``in_memory`` bytes comes back as ``bytes``;
a larger one as a :class:`SpooledBody`, the bytes written to an unnamed temporary file (``TMPDIR``;
removed by the OS when closed, even if the process dies) a block at a time, so memory holds one block
whatever the body's size. The caller reads it back (:meth:`SpooledBody.open`) and closes it.

What it deliberately does not know. What the body is (the batch submit parses it item by item,
``relay.batches.submission``), who asked, error shapes.

Invariants. A disconnect before the end raises ``ClientDisconnected`` and leaves no file behind; so
does a body over the limit (413). File writes run in a worker thread, never in the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from typing import IO, Final

from starlette.types import Receive, Scope

from relay.errors import PayloadTooLarge
from relay.http.wire import ClientDisconnected

IN_MEMORY: Final = 1 << 20  # bodies up to this size are read whole: parsing them at once is faster
_BLOCK: Final = 1 << 20  # bytes gathered before one write to the spool file


class SpooledBody:
    """A request body in an unnamed temporary file (``size`` bytes); close it when done."""

    __slots__ = ("_file", "size")

    def __init__(self, file: IO[bytes], size: int) -> None:
        self._file = file
        self.size = size

    def open(self) -> IO[bytes]:
        """A reader from the first byte; close it when done (the body stays until :meth:`close`).
        Readers share one position (a duplicated descriptor): read with one at a time."""
        reader = os.fdopen(os.dup(self._file.fileno()), "rb", closefd=True)
        reader.seek(0)
        return reader

    def sha256(self, prefix: bytes = b"") -> str:
        """Hex SHA-256 of ``prefix`` followed by the body (blocking: run it in a thread)."""
        digest = hashlib.sha256(prefix)
        with self.open() as reader:
            while block := reader.read(_BLOCK):
                digest.update(block)
        return digest.hexdigest()

    def close(self) -> None:
        self._file.close()


async def spool_body(
    receive: Receive,
    scope: Scope,
    limit: int,
    *,
    what: str = "request body",
    setting: str = "RELAY_MAX_REQUEST_BYTES",
    in_memory: int = IN_MEMORY,
) -> bytes | SpooledBody:
    """The whole request body: ``bytes`` up to ``in_memory`` bytes, else a :class:`SpooledBody`. 413
    for anything over ``limit`` (before reading it all when ``Content-Length`` says so)."""
    too_large = PayloadTooLarge(f"{what} is larger than {limit} bytes ({setting})")
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise too_large
    parts: list[bytes] = []
    held = size = 0
    file: IO[bytes] | None = None
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnected
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise too_large
                parts.append(chunk)
                held += len(chunk)
                if size > in_memory and held >= _BLOCK:
                    if file is None:
                        file = await asyncio.to_thread(_new_file)
                    await asyncio.to_thread(file.write, b"".join(parts))
                    parts, held = [], 0
            if not message.get("more_body", False):
                break
        if file is None and size <= in_memory:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if file is None:
            file = await asyncio.to_thread(_new_file)
        await asyncio.to_thread(_finish, file, b"".join(parts))
        spooled, file = SpooledBody(file, size), None
        return spooled
    finally:
        if file is not None:
            file.close()


def _new_file() -> IO[bytes]:
    return tempfile.TemporaryFile(prefix="relay-body-")


def _finish(file: IO[bytes], data: bytes) -> None:
    file.write(data)
    file.flush()
