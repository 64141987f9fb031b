"""How Relay's upstream client uses its connections, against the raw loopback server of
``raw_server``: kept alive and reused while the provider allows it, a new one when it does not, an
answer delimited by the connection's end read to that end, a kept connection the provider closed
while idle retired before reuse even when the loop has not read the close, a request never sent twice,
informational answers skipped, a large
answer read whole through the client's read-pause, and a header that would split the request refused
before anything is sent."""

from __future__ import annotations

import asyncio

import pytest

from relay.upstream import Upstream, UpstreamConnectionError
from relay.upstream import client as client_module

from .raw_server import RawServer, answer


async def test_connections_are_reused_while_the_provider_keeps_them_open(
    server: RawServer, upstream: Upstream
) -> None:
    server.handlers["/a"] = answer("200 OK", b"one")
    server.handlers["/close"] = answer("200 OK", b"last", "Connection: close")
    for _ in range(3):
        assert await (await upstream.post(server.url + "/a", {}, b"{}")).read() == b"one"
    assert server.connections == 1
    assert await (await upstream.post(server.url + "/close", {}, b"{}")).read() == b"last"
    assert await asyncio.wait_for(server.closed.get(), 5) == "/close"  # the client hung up too
    assert await (await upstream.post(server.url + "/a", {}, b"{}")).read() == b"one"
    assert server.connections == 2


async def test_a_connection_the_provider_closed_while_idle_is_not_used_again(
    server: RawServer, upstream: Upstream
) -> None:
    async def answer_then_hang_up(
        head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # no Connection: close: the client learns of it from the socket alone
        raise ConnectionError

    server.handlers["/once"] = answer_then_hang_up
    assert await (await upstream.post(server.url + "/once", {}, b"{}")).read() == b"ok"
    assert await asyncio.wait_for(server.closed.get(), 5) == "/once"
    await asyncio.sleep(0.05)  # the client's side sees the close
    assert await (await upstream.post(server.url + "/once", {}, b"{}")).read() == b"ok"
    assert server.connections == 2


async def test_a_kept_connection_the_provider_closed_unseen_by_the_loop_is_not_reused(
    server: RawServer, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider closed an idle kept connection (its keep-alive ran out: uvicorn's is 5 s), and the
    event loop has not read that close yet (a busy loop reads it late): before reusing a connection
    idle for more than ``IDLE_CHECK_S`` the client peeks at its socket, sees the close, and opens a new
    connection instead of writing the request on the dead one (which failed it with a 502)."""
    monkeypatch.setattr(client_module, "IDLE_CHECK_S", 0.01)
    server.handlers["/a"] = answer("200 OK", b"one")
    assert await (await upstream.post(server.url + "/a", {}, b"{}")).read() == b"one"
    [kept] = [c for pooled in upstream._idle.values() for c in pooled]
    assert kept.transport is not None
    kept.transport.pause_reading()  # the loop does not read this socket: the close stays unseen
    writer = server.writers[-1]
    writer.close()  # the provider's keep-alive ends
    await asyncio.sleep(0.05)
    assert not kept.closed  # the client has not noticed
    assert await (await upstream.post(server.url + "/a", {}, b"{}")).read() == b"one"
    assert server.connections == 2
    assert kept.closed  # retired


async def test_a_kept_connection_still_open_is_reused_after_its_check(
    server: RawServer, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "IDLE_CHECK_S", 0.01)
    server.handlers["/a"] = answer("200 OK", b"one")
    for _ in range(3):
        assert await (await upstream.post(server.url + "/a", {}, b"{}")).read() == b"one"
        await asyncio.sleep(0.05)  # idle past the check's threshold each time
    assert server.connections == 1


async def test_a_request_the_provider_hangs_up_on_is_never_sent_twice(
    server: RawServer, upstream: Upstream
) -> None:
    """A kept connection that the provider closes under a request, without a byte of answer, fails
    that request: the provider may have read it and started working (a generation that a proxy then
    cut), so sending it again could pay for it twice. The key pool decides what happens next."""
    kept: set[asyncio.StreamWriter] = set()

    async def first_on_each_connection(
        head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if writer in kept:  # the second request on a connection: hung up on, unanswered
            writer.close()
            raise ConnectionError
        kept.add(writer)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()

    server.handlers["/kept"] = first_on_each_connection
    assert await (await upstream.post(server.url + "/kept", {}, b"{}")).read() == b"ok"
    with pytest.raises(UpstreamConnectionError):
        await upstream.post(server.url + "/kept", {}, b"{}")
    assert server.connections == 1
    assert [h.split(b" ")[1] for h in server.heads] == [b"/kept"] * 2  # each request sent once


async def test_an_answer_ended_by_the_connection_is_read_to_its_end(
    server: RawServer, upstream: Upstream
) -> None:
    async def until_close(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart one, ")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"part two")
        await writer.drain()
        writer.close()
        raise ConnectionError

    server.handlers["/eof"] = until_close
    assert await (await upstream.post(server.url + "/eof", {}, b"{}")).read() == b"part one, part two"


async def test_informational_answers_are_skipped(server: RawServer, upstream: Upstream) -> None:
    async def early_hints(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\nX-Final: yes\r\n\r\ndone")
        await writer.drain()

    server.handlers["/hints"] = early_hints
    response = await upstream.post(server.url + "/hints", {}, b"{}")
    assert response.status == 201
    assert response.headers.get("link") is None
    assert response.headers["x-final"] == "yes"
    assert await response.read() == b"done"


async def test_a_large_answer_is_read_whole_through_the_read_pause(
    server: RawServer, upstream: Upstream
) -> None:
    body = bytes(range(256)) * 40_000  # 10 MB, far past the client's unread-bytes bound

    async def large(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(body), 1_000_000):
            piece = body[start : start + 1_000_000]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server.handlers["/large"] = large
    response = await upstream.post(server.url + "/large", {}, b"{}")
    received = bytearray()
    async for chunk in response.chunks():
        received += chunk
        await asyncio.sleep(0)  # a reader slower than the socket
    assert bytes(received) == body
    assert await (await upstream.post(server.url + "/large", {}, b"{}")).read() == body
    assert server.connections == 1


@pytest.mark.parametrize("header", [("x-a", "v\r\nx-injected: 1"), ("x-a\nb", "v"), ("x-a", "v\n")])
async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(
    server: RawServer, upstream: Upstream, header: tuple[str, str]
) -> None:
    with pytest.raises(ValueError, match="line break"):
        await upstream.post(server.url + "/never", dict([header]), b"{}")
    assert server.heads == []


async def test_a_large_request_body_is_sent_whole(server: RawServer, upstream: Upstream) -> None:
    """The server reads exactly content-length bytes: a short or long body would break the next
    request on the same connection."""
    server.handlers["/big"] = answer("200 OK", b"taken")
    for body in (b"x" * 3_000_000, b"{}"):
        assert await (await upstream.post(server.url + "/big", {}, body)).read() == b"taken"
    assert b"content-length: 3000000\r\n" in server.heads[0].lower()
    assert server.connections == 1


async def test_a_host_name_is_resolved_and_each_address_tried_in_turn(
    server: RawServer, upstream: Upstream
) -> None:
    """``localhost`` may resolve to ``::1`` first, where nothing listens here: the next address answers.
    A second connection (the first was discarded) reuses the resolved addresses."""
    server.handlers["/named"] = answer("200 OK", b"by name")
    url = server.url.replace("127.0.0.1", "localhost") + "/named"
    first = await upstream.post(url, {}, b"{}")
    assert first.status == 200
    first.discard()
    assert await (await upstream.post(url, {}, b"{}")).read() == b"by name"
    assert server.connections == 2
    assert b"host: localhost:" in server.heads[-1]


@pytest.mark.parametrize("parting", ["later", "with the answer"])
async def test_bytes_after_an_answer_retire_its_connection(
    server: RawServer, upstream: Upstream, parting: str
) -> None:
    """A server that sends anything after an answer (a parting 408, a stray second answer) is not
    trusted with another request: the answer read is the first one, and the next call gets a new
    connection."""
    stray = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 4\r\n\r\nlate"

    async def then_more(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
        if parting == "later":
            writer.write(first)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(stray)
        else:
            writer.write(first + stray)
        await writer.drain()

    server.handlers["/more"] = then_more
    server.handlers["/after"] = answer("200 OK", b"fresh")
    response = await upstream.post(server.url + "/more", {}, b"{}")
    assert (response.status, await response.read()) == (200, b"first")
    await asyncio.sleep(0.1)
    again = await upstream.post(server.url + "/after", {}, b"{}")
    assert (again.status, await again.read()) == (200, b"fresh")
    assert server.connections == 2
