"""One HTTP/1.1 connection to a provider, one exchange at a time: a protocol on the event loop's own
transport, with httptools (llhttp, the parser uvicorn uses) reading the answer.

Why not a general client: Relay sends one kind of request (a POST or GET with a known body, headers it
built itself) and needs four things back — the status, a couple of headers, the body whole or as it
arrives, and a hang-up the moment nobody will read the rest. A protocol that does only that, with no
per-request objects beyond the answer's own, spends a fraction of a general client's CPU per call
(docs/benchmarks.md, "The upstream client").

Timing: one timer per exchange, re-armed only when it fires, bounds the longest silence (the read
timeout, from the request's write to the head and between body bytes); reading paused for a slow reader
is not silence. Buffering: at most ``HIGH_WATER`` unread body bytes, then the socket stops being read.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Final

import httptools

HIGH_WATER: Final = 256 * 1024
"""Unread body bytes past which the socket is not read until the reader catches up."""

_FRAMING: Final = (b"content-length", b"transfer-encoding")

_JOIN_MAX: Final = 64 * 1024
"""Request bodies up to this size are sent in one write with their head."""


class Broken(Exception):
    """The exchange cannot go on; ``args[0]`` names what happened, never a URL or a header."""


class Silent(Exception):
    """The read timeout passed with no byte from the provider."""


class Connection(asyncio.Protocol):
    """A pooled connection. ``send`` starts an exchange; ``head`` and ``take`` wait for the answer."""

    __slots__ = (
        "_buffer",
        "_buffered",
        "_exchanging",
        "_failure",
        "_informational",
        "_keep_alive",
        "_last_read",
        "_loop",
        "_parser",
        "_paused",
        "_silent",
        "_timeout",
        "_timer",
        "_waiter",
        "closed",
        "complete",
        "head_done",
        "headers",
        "idle_since",
        "origin",
        "status",
        "transport",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: tuple[str, str, int], read_timeout_s: float):
        self._loop = loop
        self._timeout = read_timeout_s
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._exchanging = False
        self._parser = httptools.HttpResponseParser(self)  # one per connection: answer after answer
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self._informational = False
        self._keep_alive = False
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._failure: str | None = None
        self._silent = False
        self._last_read = 0.0

    # -- the exchange ------------------------------------------------------------------------------------

    def send(self, head: bytes, body: bytes | None) -> None:
        """Write one request and start its read timeout. The connection must be idle."""
        transport = self.transport
        assert transport is not None
        self._exchanging = True
        if body and len(body) > _JOIN_MAX:
            transport.writelines((head, body))  # not copied into one buffer first
        else:
            transport.write(head + body if body else head)  # one segment, one send
        now = self._loop.time()
        self._last_read = now
        self._timer = self._loop.call_at(now + self._timeout, self._check_silence)

    async def head(self) -> None:
        """Wait for the answer's status line and headers."""
        while not self.head_done:
            self._raise_if_failed()
            await self._wait()

    async def take(self) -> bytes:
        """The body bytes received since the last call, waiting for some; ``b""`` once the body ended."""
        while True:
            buffer = self._buffer
            if buffer:
                data = buffer[0] if len(buffer) == 1 else b"".join(buffer)
                self._buffer = []
                self._buffered = 0
                if self._paused:
                    self._paused = False
                    self._last_read = self._loop.time()
                    if self.transport is not None:
                        self.transport.resume_reading()
                return data
            if self.complete:
                return b""
            self._raise_if_failed()
            await self._wait()

    def reusable(self) -> bool:
        """True when the exchange ended cleanly and the provider keeps the connection open."""
        return (
            self.complete
            and not self.closed
            and self._failure is None
            and self._keep_alive
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def recycle(self, now: float) -> None:
        """Make a finished connection ready for the next exchange."""
        self._stop_timer()
        self._reset()
        self._exchanging = False
        self.idle_since = now

    def hung_up(self) -> bool:
        """Whether the provider closed this idle connection, or sent anything on it, in a way the event
        loop has not read yet: the socket is peeked, not read. An idle connection has nothing to say,
        so bytes (a parting 408, a TLS close alert), an end of stream or an error all retire it."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return True
        raw = transport.get_extra_info("socket")
        if raw is None:
            return False
        try:  # a duplicate of the descriptor: uvloop's transports hand out no socket that can recv
            probe = socket.fromfd(raw.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        except OSError:
            return True
        try:
            probe.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False  # nothing waiting: still open
        except OSError:
            return True
        finally:
            probe.close()
        return True

    def abort(self) -> None:
        """Hang up now (the answer is not wanted, or cannot be trusted any more)."""
        self._stop_timer()
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _raise_if_failed(self) -> None:
        if self._silent:
            raise Silent
        if self._failure is not None:
            raise Broken(self._failure)
        if self.closed:
            raise Broken("ConnectionClosed")

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _check_silence(self) -> None:
        self._timer = None
        if self.complete or self.closed:
            return
        now = self._loop.time()
        due = now + self._timeout if self._paused else self._last_read + self._timeout
        if due > now:
            self._timer = self._loop.call_at(due, self._check_silence)
            return
        self._silent = True
        self._wake()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- asyncio.Protocol --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass

    def data_received(self, data: bytes) -> None:
        if not self._exchanging or self.complete:  # bytes after the answer (a parting 408): never reuse
            self.abort()
            return
        self._last_read = self._loop.time()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._failure = type(exc).__name__
            self.abort()
            self._wake()

    def eof_received(self) -> bool:
        return False  # close our side too: an HTTP/1.1 answer never continues after the provider's EOF

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timer()
        if not self.complete and self._failure is None:
            if exc is None and self.head_done and not self._framed():
                self.complete = True  # a body delimited by the end of the connection
            else:
                self._failure = type(exc).__name__ if exc is not None else "ConnectionClosed"
        self._wake()

    def pause_writing(self) -> None:
        """Requests are written whole; a full send buffer only waits for the socket."""

    def resume_writing(self) -> None:
        """See :meth:`pause_writing`."""

    # -- httptools callbacks -----------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.complete:  # a second answer in the same bytes as the first: the connection is not trusted
            self._failure = "UnexpectedData"
            return
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue, 103 Early Hints: the answer is still to come
            self._informational = True
            self.headers = []
            return
        self.status = status
        self._keep_alive = self._parser.should_keep_alive()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            return
        self._buffer.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.complete:
            return
        self.complete = True
        self._stop_timer()
        self._wake()

    def _framed(self) -> bool:
        return any(name in _FRAMING for name, _ in self.headers)
