"""Relay's upstream client (``relay.upstream``) against a raw HTTP/1.1 server on loopback: it is a
plain pipe (no redirect followed, no decompression, no proxy from the environment, no header of the
caller's dropped), a stream's chunks arrive as they are sent, a response not forwarded or a stream
left midway closes its connection instead of pooling it, and every failure is one of the two errors
with a message that names only the exception's class.

The server is ``raw_server.RawServer``; every test runs on both event loops (conftest.py).
"""

from __future__ import annotations

import asyncio
import gzip

import pytest

from relay.upstream import Upstream, UpstreamConnectionError, UpstreamTimeout

from .raw_server import RawServer, answer, one_chunk_then_silence, wait_for_hangup


async def test_sends_what_it_is_given_and_passes_the_answer_through(
    server: RawServer, upstream: Upstream
) -> None:
    packed = gzip.compress(b'{"ok": true}')
    server.handlers["/v1/x"] = answer("200 OK", packed, "Content-Encoding: gzip", "X-Request-Id: r-1")
    response = await upstream.post(
        server.url + "/v1/x", {"Authorization": "Bearer k", "Content-Type": "application/json"}, b"{}"
    )
    assert response.status == 200
    assert response.headers.get("content-encoding") == "gzip"
    assert response.headers.get("X-REQUEST-ID") == "r-1"
    assert await response.read() == packed  # not decompressed
    head = server.heads[-1].decode().lower()
    assert "authorization: bearer k" in head
    assert "accept-encoding" not in head
    assert "user-agent" not in head  # nothing the caller did not send but the request's own framing


async def test_a_redirect_is_answered_not_followed(server: RawServer, upstream: Upstream) -> None:
    server.handlers["/moved"] = answer("302 Found", b"", "Location: /elsewhere")
    response = await upstream.get(server.url + "/moved", {})
    assert response.status == 302
    assert response.headers.get("location") == "/elsewhere"
    assert await response.read() == b""
    assert len(server.heads) == 1


async def test_environment_proxies_are_ignored(
    server: RawServer, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    client = Upstream(timeout_s=1.0)
    await client.start()
    server.handlers["/p"] = answer("200 OK", b"direct")
    try:
        assert await (await client.get(server.url + "/p", {})).read() == b"direct"
    finally:
        await client.close()


async def test_stream_chunks_arrive_as_they_are_sent(server: RawServer, upstream: Upstream) -> None:
    release = asyncio.Event()

    async def sse(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        writer.write(b"9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        await release.wait()  # the second event only once the client has the first
        writer.write(b"9\r\ndata: 2\n\n\r\n0\r\n\r\n")
        await writer.drain()

    server.handlers["/sse"] = sse
    response = await upstream.post(server.url + "/sse", {}, b"{}")
    chunks = response.chunks()
    assert await anext(chunks) == b"data: 1\n\n"
    release.set()
    assert [chunk async for chunk in chunks] == [b"data: 2\n\n"]


async def test_a_stream_left_midway_closes_its_connection(server: RawServer, upstream: Upstream) -> None:
    server.handlers["/endless"] = one_chunk_then_silence
    response = await upstream.post(server.url + "/endless", {}, b"{}")

    async def consume() -> None:
        async for _ in response.chunks():
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.wait_for(server.closed.get(), 5) == "/endless"


async def test_a_discarded_answer_closes_its_connection_and_the_next_call_opens_another(
    server: RawServer, upstream: Upstream
) -> None:
    async def unfinished(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 100000\r\n\r\npartial")
        await writer.drain()
        await wait_for_hangup(reader)

    server.handlers["/busy"] = unfinished
    server.handlers["/ok"] = answer("200 OK", b"fine")
    response = await upstream.post(server.url + "/busy", {}, b"{}")
    assert response.status == 503
    response.discard()
    assert await asyncio.wait_for(server.closed.get(), 5) == "/busy"
    assert await (await upstream.post(server.url + "/ok", {}, b"{}")).read() == b"fine"
    assert server.connections == 2


async def test_errors_name_the_failure_never_the_url(upstream: Upstream, server: RawServer) -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    with pytest.raises(UpstreamConnectionError) as refused:
        await upstream.post(f"http://127.0.0.1:{port}/v1/x?key=sk-secret", {}, b"{}")
    assert refused.value.message == "upstream connection failed: ConnectionRefusedError"

    async def silent(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await wait_for_hangup(reader)

    server.handlers["/silent"] = silent
    with pytest.raises(UpstreamTimeout) as silent_head:
        await upstream.post(server.url + "/silent?key=sk-secret", {}, b"{}")
    assert silent_head.value.message == "upstream did not answer within 1s"

    async def cut(head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
        await writer.drain()
        writer.transport.abort()

    server.handlers["/cut"] = cut
    response = await upstream.post(server.url + "/cut", {}, b"{}")
    with pytest.raises(UpstreamConnectionError) as broken:
        await response.read()
    assert broken.value.message.startswith("upstream connection failed while reading: ")
    assert "sk-secret" not in refused.value.message + silent_head.value.message + broken.value.message

    server.handlers["/stalls"] = one_chunk_then_silence
    response = await upstream.post(server.url + "/stalls", {}, b"{}")
    seen = []
    with pytest.raises(UpstreamTimeout, match="upstream timed out while streaming"):
        async for chunk in response.chunks():
            seen.append(chunk)
    assert seen == [b"hello"]


async def test_a_call_cancelled_before_the_answer_hangs_up_at_once(server: RawServer) -> None:
    """A caller gone (a client that disconnected, a batch item's timeout) cancels the call: the
    upstream connection is closed then, not when the answer comes or the read timeout fires, so a
    provider stops generating what nobody will read. (pyreqwest 0.15, measured as a replacement client,
    kept the request running to its answer: see docs/benchmarks.md, the upstream client.)"""
    patient = Upstream(timeout_s=120.0, connect_timeout_s=5.0)  # its own timeout would hang up far later
    await patient.start()
    try:
        reached = asyncio.Event()

        async def never_answers(
            head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            reached.set()
            await wait_for_hangup(reader)

        server.handlers["/slow"] = never_answers
        call = asyncio.create_task(patient.post(server.url + "/slow", {}, b"{}"))
        await asyncio.wait_for(reached.wait(), timeout=30)  # the request reached the upstream
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await asyncio.wait_for(server.closed.get(), timeout=30) == "/slow"
    finally:
        await patient.close()


async def test_both_loops_are_under_test(request: pytest.FixtureRequest) -> None:
    """Each test of this directory runs once per loop of conftest.py: this one checks the loop it got
    is the one its name says."""
    running = type(asyncio.get_running_loop()).__module__.split(".")[0]
    assert f"[{running}]" in request.node.name
