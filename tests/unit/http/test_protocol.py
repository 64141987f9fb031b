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
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

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
    "_unset_keepalive_if_required",
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
    assert cycle is not None
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
