"""Contract: the pipelined Redis connection under the response cache (``relay.state.pipelined``), on the
real Redis at ``RELAY_TEST_REDIS_URL``: concurrent commands get their own replies, an error reply fails
only its command, a killed connection fails what waits and the next command reconnects, and a server
that never answers times a command out (a loopback listener that accepts and stays silent)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from relay.state.pipelined import PipelinedConnection
from tests.fixtures.databases import REDIS_URL
from tests.fixtures.shared_state import redis_namespace


@pytest.mark.redis
async def test_concurrent_commands_each_get_their_own_reply() -> None:
    async with redis_namespace() as (prefix, _admin):
        wire = PipelinedConnection(REDIS_URL, timeout_s=2.0)
        try:
            await asyncio.gather(
                *(wire.execute("SET", f"{prefix}k{i}", f"v{i}", "EX", 60) for i in range(200))
            )
            replies = await asyncio.gather(*(wire.execute("GET", f"{prefix}k{i}") for i in range(200)))
            assert replies == [f"v{i}".encode() for i in range(200)]
            assert await wire.execute("GET", f"{prefix}absent") is None
        finally:
            await wire.close()


@pytest.mark.redis
async def test_an_error_reply_fails_its_command_only() -> None:
    async with redis_namespace() as (prefix, _admin):
        wire = PipelinedConnection(REDIS_URL, timeout_s=2.0)
        try:
            await wire.execute("SET", f"{prefix}s", "text")
            bad, good = await asyncio.gather(
                wire.execute("LPUSH", f"{prefix}s", "x"),
                wire.execute("GET", f"{prefix}s"),
                return_exceptions=True,
            )
            assert isinstance(bad, ResponseError)
            assert good == b"text"
        finally:
            await wire.close()


@pytest.mark.redis
async def test_a_killed_connection_is_replaced_by_the_next_command() -> None:
    async with redis_namespace() as (prefix, admin):
        wire = PipelinedConnection(REDIS_URL, timeout_s=2.0)
        try:
            await wire.execute("SET", f"{prefix}k", "v")
            first_id = await wire.execute("CLIENT", "ID")
            await admin.client_kill_filter(_id=first_id)
            await asyncio.sleep(0.1)  # the reader sees the connection end
            assert await wire.execute("GET", f"{prefix}k") == b"v"
            assert await wire.execute("CLIENT", "ID") != first_id
        finally:
            await wire.close()


async def _commands(reader: asyncio.StreamReader) -> AsyncIterator[list[bytes]]:
    """The RESP commands a client sends (arrays of bulk strings), one list each."""
    while line := await reader.readline():
        parts = []
        for _ in range(int(line[1:])):
            size = int((await reader.readline())[1:])
            parts.append((await reader.readexactly(size + 2))[:-2])
        yield parts


async def test_a_server_that_never_answers_times_the_command_out_and_a_late_reply_is_dropped() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answers the connection handshake (HELLO, CLIENT …), never a GET."""
        accepted.append(writer)
        async for command in _commands(reader):
            if command[0].upper() == b"HELLO":
                writer.write(b"%1\r\n$5\r\nproto\r\n:3\r\n")
            elif command[0].upper() == b"CLIENT":
                writer.write(b"+OK\r\n")

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    wire = PipelinedConnection(f"redis://127.0.0.1:{port}/0", timeout_s=0.3)
    try:
        with pytest.raises(RedisTimeoutError):
            await wire.execute("GET", "first")
        # The late reply to the timed-out GET is dropped; the next command gets its own reply.
        second = asyncio.create_task(wire.execute("GET", "second"))
        await asyncio.sleep(0.05)
        assert len(accepted) == 1, "a timed-out command keeps its connection"
        accepted[0].write(b"$4\r\nlate\r\n$6\r\nsecond\r\n")
        assert await second == b"second"
    finally:
        await wire.close()
        for writer in accepted:
            writer.close()
        await asyncio.sleep(0.05)  # the handlers read the end of their streams and return
        server.close()
        await server.wait_closed()


def test_pack_writes_what_redis_py_writes() -> None:
    from redis.asyncio.connection import Connection

    from relay.state.pipelined import pack

    for args in [("GET", "relay:rc:pol:k"), ("SET", "k:é", b"\x00\r\nbody", "EX", 3600), ("CLIENT", "ID")]:
        assert pack(args) == b"".join(Connection().pack_command(*args))
