"""``relay.http.protocol`` leans on uvicorn's internals (``HttpToolsProtocol``'s methods and attributes,
``STATUS_LINE``, ``ServerState``), which uvicorn may change in any release: pyproject bounds uvicorn
below the next minor, and these tests are what to run when raising that bound. They fail when an
overridden or called method is gone or changed its signature, when an attribute the subclass reads is
no longer there after a real connection, or when ``STATUS_LINE`` changes shape.

A real protocol instance serves a real loopback connection (an asyncio server with uvicorn's loaded
``Config``), so the attributes are checked as uvicorn sets them, not as the test imagines them.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from relay.http.cycle import JOIN_MAX, RelayCycle
from relay.http.protocol import Bounds, RelayHttpProtocol, protocol_class

OVERRIDDEN = (
    "__init__",
    "connection_made",
    "data_received",
    "send_400_response",
    "on_message_begin",
    "on_headers_complete",
    "on_message_complete",
    "on_response_complete",
)
"""Methods RelayHttpProtocol overrides: each calls (or replaces) uvicorn's."""

CALLED = (
    "_should_upgrade",
    "handle_websocket_upgrade",
    "_unsupported_upgrade_warning",
)
"""uvicorn's own methods the overrides call, with no arguments."""

BOUNDS = Bounds(max_header_bytes=1024, max_headers=8, header_timeout_s=30.0, body_read_timeout_s=30.0)


def render(path: str, status: int, code: str, message: str) -> bytes:
    return orjson.dumps({"path": path, "status": status, "code": code, "message": message})


def test_every_overridden_method_exists_on_uvicorn_with_the_same_parameters() -> None:
    for name in OVERRIDDEN:
        base = getattr(HttpToolsProtocol, name, None)
        assert base is not None, f"uvicorn's HttpToolsProtocol has no {name} any more"
        ours = getattr(RelayHttpProtocol, name)
        assert ours is not base, f"RelayHttpProtocol no longer overrides {name}: update OVERRIDDEN"
        theirs = [p.name for p in inspect.signature(base).parameters.values()]
        if list(inspect.signature(ours).parameters) == ["self", "args", "kwargs"]:
            # __init__ passes everything through; uvicorn's construction is checked by the tests below.
            assert theirs[:3] == ["self", "config", "server_state"], theirs
            continue
        assert list(inspect.signature(ours).parameters) == theirs, name


def test_the_methods_the_overrides_call_still_take_no_arguments() -> None:
    for name in CALLED:
        method = getattr(HttpToolsProtocol, name, None)
        assert callable(method), f"uvicorn's HttpToolsProtocol has no {name} any more"
        assert list(inspect.signature(method).parameters) == ["self"], name


def test_the_asgi_task_starter_still_takes_a_cycle_and_an_app() -> None:
    """``on_response_complete`` starts a pipelined request through uvicorn's ``_start_asgi_task``."""
    parameters = list(inspect.signature(HttpToolsProtocol._start_asgi_task).parameters)
    assert parameters == ["self", "cycle", "app"], parameters


def test_the_cycle_keeps_uvicorns_receive_and_runner() -> None:
    """``on_headers_complete`` turns uvicorn's new cycle into a RelayCycle in place: only ``send`` is
    Relay's, and the class adds no slots (an instance's class can change only between equal layouts)."""
    assert issubclass(RelayCycle, RequestResponseCycle)
    assert RelayCycle.receive is RequestResponseCycle.receive
    assert RelayCycle.run_asgi is RequestResponseCycle.run_asgi
    assert "__slots__" not in vars(RelayCycle) and "__slots__" not in vars(RequestResponseCycle)


def test_status_line_is_the_full_http_1_1_line_of_each_status_relay_refuses_with() -> None:
    for status, reason in (
        (400, b"Bad Request"),
        (408, b"Request Timeout"),
        (431, b"Request Header Fields Too Large"),
    ):
        assert STATUS_LINE[status] == b"HTTP/1.1 %d %s\r\n" % (status, reason)


def test_server_state_keeps_the_connections_the_sweep_walks() -> None:
    assert isinstance(ServerState().connections, set)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()
    if scope["path"] == "/big":  # a body larger than a held head is joined with
        body = b"b" * (JOIN_MAX + 1)
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    if scope["path"] == "/parts":  # a length announced, the body sent in three parts
        await send({"type": "http.response.start", "status": 200, "headers": [(b"Content-Length", b"6")]})
        for part in (b"ab", b"", b"cd"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"ef"})
        return
    if scope["path"] == "/chunks":  # no length: chunked, every part framed, the end marked once
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
        for part in (b"one", b"", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if scope["path"] == "/close":  # the application ends keep-alive
        headers = [(b"content-length", b"2"), (b"connection", b"close")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if scope["path"] == "/bad-header":
        headers = [(b"content-length", b"2"), (b"x-bad", b"a\r\nx-injected: 1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    if scope["path"] == "/stream":  # no content-length: chunked, the head must not wait for the body
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0.2)
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    if scope["path"] == "/slow":
        await asyncio.sleep(0.2)  # the body comes later than the head was sent
    await send({"type": "http.response.body", "body": b"ok"})


class Listener:
    """A real asyncio server whose connections are RelayHttpProtocol instances over uvicorn's Config."""

    def __init__(self) -> None:
        self.state = ServerState()
        self.protocols: list[RelayHttpProtocol] = []
        self.port = 0

    def new_protocol(self) -> RelayHttpProtocol:
        config = uvicorn.Config(app, http=protocol_class(BOUNDS, render), lifespan="off", log_config=None)
        config.load()
        protocol = config.http_protocol_class(config=config, server_state=self.state, app_state={})
        assert isinstance(protocol, RelayHttpProtocol)
        self.protocols.append(protocol)
        return protocol

    async def exchange(self, request: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
        return answer


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listening = Listener()
    server = await asyncio.get_running_loop().create_server(listening.new_protocol, "127.0.0.1", 0)
    listening.port = server.sockets[0].getsockname()[1]
    yield listening
    server.close()
    await server.wait_closed()


def status_and_body(answer: bytes) -> tuple[bytes, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], orjson.loads(body)


async def test_a_served_request_leaves_the_attributes_the_protocol_reads(listener: Listener) -> None:
    answer = await listener.exchange(b"GET /x?q=1 HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"ok")
    (protocol,) = listener.protocols
    assert protocol in listener.state.connections or protocol.transport.is_closing()
    assert isinstance(protocol.loop, asyncio.AbstractEventLoop)
    assert protocol.url == b"/x?q=1"
    assert protocol.headers == [(b"host", b"t"), (b"connection", b"close")]
    cycle = protocol.cycle
    assert isinstance(cycle, RelayCycle)
    assert cycle.response_started and cycle.response_complete and not cycle.disconnected
    assert isinstance(cycle.message_event, asyncio.Event)


async def test_a_malformed_request_is_refused_through_the_override(listener: Listener) -> None:
    status, body = status_and_body(await listener.exchange(b"NOT HTTP AT ALL\r\n\r\n"))
    assert status == b"HTTP/1.1 400 Bad Request"
    assert body["code"] == "invalid_request"


async def test_too_many_headers_are_refused_after_the_parser_counted_them(listener: Listener) -> None:
    headers = b"".join(b"x-h%d: v\r\n" % n for n in range(BOUNDS.max_headers + 1))
    status, body = status_and_body(await listener.exchange(b"GET /many HTTP/1.1\r\n" + headers + b"\r\n"))
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert body == {"path": "/many", "status": 431, "code": "too_many_headers", "message": body["message"]}


async def test_an_oversized_head_is_refused_before_the_parser_sees_it(listener: Listener) -> None:
    request = b"GET /big HTTP/1.1\r\nx-big: " + b"a" * BOUNDS.max_header_bytes + b"\r\n\r\n"
    status, body = status_and_body(await listener.exchange(request))
    assert status == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert body["code"] == "headers_too_large"


async def first_read(listener: Listener, request: bytes) -> bytes:
    """What the first read of the answer returns: everything the server had sent in one go."""
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(request)
    await writer.drain()
    first = await asyncio.wait_for(reader.read(65536), timeout=30)
    writer.close()
    return first


async def test_a_whole_answers_head_and_body_leave_together(listener: Listener) -> None:
    """The head of an answer with a content-length waits for its body (one send, one wake-up of the
    client), even when the application sends the body later."""
    first = await first_read(listener, b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"\r\n\r\nok")


async def test_a_streams_head_leaves_before_its_body(listener: Listener) -> None:
    first = await first_read(listener, b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"transfer-encoding: chunked\r\n\r\n")


async def test_a_head_request_is_answered_with_its_head_alone(listener: Listener) -> None:
    """HEAD: uvicorn writes no body at all, so the head is never held."""
    first = await first_read(listener, b"HEAD /x HTTP/1.1\r\nhost: t\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 ") and first.endswith(b"content-length: 2\r\n\r\n")


async def exchange_keep_alive(listener: Listener, *requests: bytes) -> bytes:
    """Every request on one connection, one after another; everything read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"".join(requests))  # pipelined: the second waits for the first's answer
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), timeout=30)
    writer.close()
    return answer


async def test_pipelined_requests_are_answered_in_order_each_head_with_its_body(listener: Listener) -> None:
    answer = await exchange_keep_alive(
        listener,
        b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n",
        b"GET /parts HTTP/1.1\r\nhost: t\r\n\r\n",
        b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
    )
    answers = answer.split(b"HTTP/1.1 200 OK\r\n")
    assert answers[0] == b"" and len(answers) == 4, answer
    assert answers[1].endswith(b"content-length: 2\r\n\r\nok"), answers[1]
    assert answers[2].endswith(b"content-length: 6\r\n\r\nabcdef"), answers[2]  # the name lower-cased
    assert answers[3].endswith(b"connection: close\r\n\r\nok"), answers[3]


async def test_a_body_larger_than_the_join_limit_follows_its_head_whole(listener: Listener) -> None:
    answer = await listener.exchange(b"GET /big HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-length: %d" % (JOIN_MAX + 1) in head
    assert body == b"b" * (JOIN_MAX + 1)


async def test_a_chunked_answer_frames_every_part_and_ends_once(listener: Listener) -> None:
    answer = await listener.exchange(b"GET /chunks HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and b"x-a: 1" in head
    assert body == b"3\r\none\r\n5\r\nthree\r\n0\r\n\r\n"


async def test_an_applications_connection_close_ends_keep_alive(listener: Listener) -> None:
    answer = await exchange_keep_alive(listener, b"GET /close HTTP/1.1\r\nhost: t\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"connection: close\r\n\r\nok")


async def test_an_invalid_header_value_is_never_written(listener: Listener) -> None:
    """uvicorn's check: a value with a line break raises in the application, and nothing of that
    answer reaches the client (no injected header)."""
    answer = await listener.exchange(b"GET /bad-header HTTP/1.1\r\nhost: t\r\n\r\n")
    assert b"x-injected" not in answer
    assert not answer.startswith(b"HTTP/1.1 200 ")


async def test_the_default_headers_lead_every_answer_and_follow_their_list(listener: Listener) -> None:
    """The default block is joined once per list uvicorn's server hands out (a new ``date`` each
    second): a new list is written from the next answer on."""
    listener.state.default_headers = [(b"date", b"one"), (b"server", b"uvicorn")]
    first = await listener.exchange(b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200 OK\r\ndate: one\r\nserver: uvicorn\r\ncontent-length: 2\r\n")
    listener.state.default_headers = [(b"date", b"two"), (b"server", b"uvicorn")]
    second = await listener.exchange(b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
    assert second.startswith(b"HTTP/1.1 200 OK\r\ndate: two\r\nserver: uvicorn\r\n")
    assert first.count(b"date: ") == second.count(b"date: ") == 1


async def test_an_idle_keep_alive_connection_is_closed_by_the_sweep_after_its_timeout(
    listener: Listener,
) -> None:
    """No timer per answer: the keep-alive timeout is the connection's deadline, which the sweep acts on
    (called here with chosen clocks, so the test does not wait for a second)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    assert head.startswith(b"HTTP/1.1 200 ")
    assert await asyncio.wait_for(reader.readexactly(2), timeout=30) == b"ok"
    (protocol,) = listener.protocols
    assert protocol.timeout_keep_alive_task is None  # no timer was armed
    answered = asyncio.get_running_loop().time()
    protocol.check_deadline(answered + protocol.timeout_keep_alive - 0.5)
    assert not protocol.transport.is_closing()
    writer.write(b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n")  # still open: a second request is answered
    await writer.drain()
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)).startswith(b"HTTP/1.1 200 ")
    assert await asyncio.wait_for(reader.readexactly(2), timeout=30) == b"ok"
    later = asyncio.get_running_loop().time() + protocol.timeout_keep_alive + 0.5
    protocol.check_deadline(later)
    assert await asyncio.wait_for(reader.read(), timeout=30) == b""  # closed, nothing more written
    writer.close()
