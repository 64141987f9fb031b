"""One Redis connection shared by every request, commands pipelined: the response cache's cheap call path.

Why. A cache miss makes two Redis calls (GET before the upstream call, SET after). Through
``redis.asyncio.Redis`` each one checks a connection out of the pool (a lock, a health probe), wraps
its write in ``asyncio.wait_for`` (a task per command when a socket timeout is set) and its read in a
timeout context, and packs with a general encoder: about 0.1 ms of CPU per call on the benchmark
machine, most of a miss's cost. Here a command is packed by :func:`pack` (the bytes redis-py writes)
and queued; the commands of one loop turn are written together at its end on one connection, and one
reader task reads the replies in order with redis-py's parser and hands each to the future of the
command that waits for it. Concurrent requests share the connection's writes and reads, so a busy
replica pays one system call and one wake-up for many commands.

Timeouts. A command waits ``timeout_s`` for its reply, then raises ``RedisTimeoutError``. Its future
stays in the queue, so the late reply is still read (and dropped) and the replies after it still go
to the right commands. A broken connection fails every waiting command with ``RedisConnectionError``
and the next command opens a new one (connecting is bounded by ``timeout_s`` too).

What it deliberately does not know: what the commands mean (``relay.state.response_cache``), pools
(one connection is the point; a purge's SCAN goes through an ordinary client).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

from redis.asyncio.connection import AbstractConnection, ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError


def pack(args: tuple[str | bytes | int, ...]) -> bytes:
    """``args`` as one RESP array of bulk strings: what ``Connection.pack_command`` writes for these
    types, at a fifth of its cost (it handles memoryviews, large values and encoder settings this
    path never sees)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else b"%d" % arg if isinstance(arg, int) else arg
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


class PipelinedConnection:
    """``await execute("GET", key)``: the reply (bytes, never decoded), or a ``RedisError``."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        # The pool only parses the URL (auth, db, TLS) and builds the connection; it never lends one.
        # No socket timeout on the connection itself: this class bounds each command instead.
        self._factory = ConnectionPool.from_url(
            url, socket_timeout=None, socket_connect_timeout=timeout_s, decode_responses=False
        )
        self._timeout_s = timeout_s
        self._conn: AbstractConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: deque[asyncio.Future[Any]] = deque()
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._unsent: list[bytes] = []  # commands of this loop turn, written together at its end

    async def execute(self, *args: str | bytes | int) -> Any:
        conn = self._conn if self._conn is not None else await self._connect()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # The future is queued and the command joins the unsent ones with no await between them, so
        # the queue's order is the order the server answers in.
        self._waiting.append(future)
        if not self._unsent:
            asyncio.get_running_loop().call_soon(self._write, conn)
        self._unsent.append(pack(args))
        try:
            async with asyncio.timeout(self._timeout_s):
                return await future
        except TimeoutError:
            raise RedisTimeoutError("Redis did not answer in time") from None

    def _write(self, conn: AbstractConnection) -> None:
        """Write the commands queued during this loop turn in one system call."""
        if conn is not self._conn:  # it broke meanwhile: its commands were failed and dropped
            return
        data, self._unsent = b"".join(self._unsent), []
        try:
            conn._writer.write(data)  # type: ignore[union-attr]
        except (OSError, AttributeError) as exc:  # AttributeError: the writer is gone (disconnected)
            self._broken(conn, RedisConnectionError(f"writing to Redis failed: {type(exc).__name__}"))

    async def _connect(self) -> AbstractConnection:
        async with self._connecting:
            if self._conn is not None:
                return self._conn
            conn = self._factory.make_connection()
            try:
                async with asyncio.timeout(self._timeout_s):
                    await conn.connect()
            except TimeoutError:
                await conn.disconnect(nowait=True)
                raise RedisTimeoutError("connecting to Redis timed out") from None
            self._conn = conn
            self._reader = asyncio.create_task(self._read(conn), name="relay-redis-pipelined-reader")
            return conn

    async def _read(self, conn: AbstractConnection) -> None:
        """Hand each reply to the oldest waiting command until the connection breaks."""
        waiting = self._waiting
        while True:
            try:
                reply: Any = await conn.read_response(disable_decoding=True, timeout=math.inf)
            except ResponseError as exc:  # an error reply answers one command; the stream goes on
                reply = exc
            except Exception as exc:
                self._broken(conn, RedisConnectionError(f"reading from Redis failed: {type(exc).__name__}"))
                return
            if not waiting:  # a reply nobody asked for: the stream is out of step, start again
                self._broken(conn, RedisConnectionError("Redis sent a reply nobody waited for"))
                return
            future = waiting.popleft()
            if future.done():  # its command timed out; the reply is read and dropped
                continue
            if isinstance(reply, ResponseError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def _broken(self, conn: AbstractConnection, error: Exception) -> None:
        """Fail every waiting command and forget ``conn``; the next command reconnects."""
        if self._conn is not conn:
            return
        self._conn = None
        self._unsent = []
        reader, self._reader = self._reader, None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        # Closing the socket needs no await: the transport closes on the loop's next turn.
        writer = getattr(conn, "_writer", None)
        if writer is not None:
            writer.close()
        conn._reader = None
        conn._writer = None

    async def close(self) -> None:
        conn = self._conn
        if conn is not None:
            self._broken(conn, RedisConnectionError("the connection was closed"))
            await conn.disconnect(nowait=True)
        await self._factory.disconnect()
