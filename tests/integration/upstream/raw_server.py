"""A raw HTTP/1.1 server on loopback for the upstream client's tests: an ``asyncio`` stream server, so
each test says byte for byte what the upstream sends and sees when the client hangs up."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Handler = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawServer:
    """One handler per request path; records each request head and when each connection ends."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    heads: list[bytes] = field(default_factory=list)
    closed: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    connections: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)  # each connection's, in order
    url: str = ""

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        path = ""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                path = head.split(b" ", 2)[1].decode().split("?")[0]
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                await self.handlers[path](head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.put_nowait(path)
            writer.close()


def answer(status: str, body: bytes, *headers: str) -> Handler:
    async def handle(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        extra = "".join(f"{h}\r\n" for h in headers)
        writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body)
        await writer.drain()

    return handle


async def wait_for_hangup(reader: asyncio.StreamReader) -> None:
    """Block until the client closes the connection (what the tests below watch for)."""
    while await reader.read(1024):
        pass


async def one_chunk_then_silence(
    head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """A chunked answer that sends ``hello`` and then nothing, until the client hangs up."""
    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    await writer.drain()
    await wait_for_hangup(reader)
