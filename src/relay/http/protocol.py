"""The HTTP/1.1 protocol both listeners speak: uvicorn's httptools protocol with Relay's bounds.

What it adds (SPEC §1, §7, §11), each before any application work:
- the request line and headers are capped at ``RELAY_MAX_HEADER_BYTES`` (counted as bytes arrive,
  before the parser buffers them — httptools itself has no limit, and a 128 MiB header stalled the
  event loop for seconds) and at ``RELAY_MAX_HEADERS`` headers → 431;
- ``RELAY_HEADER_TIMEOUT_S`` from accept (or from the first byte of a keep-alive connection's next
  request) to the end of the headers → 408, or a plain close when the client sent nothing at all;
- ``RELAY_BODY_READ_TIMEOUT_S``, the longest gap between two body bytes → 408 while no response has
  started, else the connection is closed; the application's ``receive`` then reports a disconnect;
- the parser's own rejections (malformed HTTP) answer a JSON 400 instead of uvicorn's text/plain.
Every one of these answers carries ``X-Relay-Request-ID``, a JSON error in the listener's shape
(``render``, handed in by ``serve``) and ``Connection: close``. Body size limits stay with the
applications, which know the route (live, batch, control, login) and its setting.

Why a subclass and not another server: uvicorn with httptools and uvloop is the fastest stack measured
for the live plane (bench/live_overhead.py), and these bounds cost a few attribute writes per request
(no timer per request: one sweep per listener per second checks every connection's deadline, the
keep-alive timeout's included). Each request's cycle is a :class:`~relay.http.cycle.RelayCycle`, whose
``send`` writes a whole answer's head and body in one send.

What it deliberately does not know: routes, credentials, bodies' meaning.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from relay.http.cycle import RelayCycle
from relay.http.wire import new_request_id

log = logging.getLogger("relay.http")

Render = Callable[[str, int, str, str], bytes]
"""(path, status, code, message) → the JSON error body of one listener's shape."""

SWEEP_INTERVAL_S = 1.0

_IDLE, _HEAD, _BODY, _APP = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class Bounds:
    max_header_bytes: int
    max_headers: int
    header_timeout_s: float
    body_read_timeout_s: float


class _Refused(Exception):
    """Raised inside a parser callback after the answer was written, to stop the parser."""


class RelayHttpProtocol(HttpToolsProtocol):
    bounds: ClassVar[Bounds]
    render: ClassVar[Render]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _IDLE
        self._head_bytes = 0
        self._deadline = math.inf
        self._refused = False

    # -- connection ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._phase = _HEAD
        self._deadline = self.loop.time() + self.bounds.header_timeout_s

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._phase == _BODY:
            self._deadline = self.loop.time() + self.bounds.body_read_timeout_s
        else:
            self._head_bytes += len(data)
            if self._head_bytes > self.bounds.max_header_bytes and not self._head_ends_within(data):
                self._too_large_head()
                return
        try:
            self.parser.feed_data(data)
        except _Refused:
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError:
            if not self._refused:
                self.refuse(400, "invalid_request", "malformed HTTP request")

    def _head_ends_within(self, data: bytes) -> bool:
        """True when the headers end inside the limit: the chunk that crosses it may carry the end of
        the headers followed by body bytes, which are not header bytes."""
        room = self.bounds.max_header_bytes - (self._head_bytes - len(data))
        return room > 0 and data.find(b"\r\n\r\n", 0, room + 4) != -1

    def _too_large_head(self) -> None:
        limit = self.bounds.max_header_bytes
        message = f"request line and headers exceed {limit} bytes (RELAY_MAX_HEADER_BYTES)"
        self.refuse(431, "headers_too_large", message)

    def send_400_response(self, msg: str) -> None:
        self.refuse(400, "invalid_request", "malformed HTTP request")

    # -- parser callbacks ------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase == _IDLE:  # the next request of a keep-alive connection: its header clock starts
            self._phase = _HEAD
            self._deadline = self.loop.time() + self.bounds.header_timeout_s

    def on_headers_complete(self) -> None:
        if len(self.headers) > self.bounds.max_headers:
            limit = self.bounds.max_headers
            self.refuse(431, "too_many_headers", f"more than {limit} request headers (RELAY_MAX_HEADERS)")
            raise _Refused
        self._phase = _BODY
        self._head_bytes = 0
        self._deadline = self.loop.time() + self.bounds.body_read_timeout_s
        previous = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle is not previous:
            # uvicorn names its cycle class inside its own method: the new cycle becomes Relay's (the
            # same object and attributes, a leaner ``send``) before its task first runs. Its task
            # resolves ``self.send`` when it starts, so the application is handed RelayCycle.send.
            cycle.__class__ = RelayCycle

    def on_message_complete(self) -> None:
        if self.cycle is not None and self.cycle.response_complete:
            # Answered before the body ended (a 401 or 413 with keep-alive): the connection is idle
            # now; the next request's headers are due within the header timeout.
            self._phase = _HEAD
            self._deadline = self.loop.time() + self.bounds.header_timeout_s
        else:
            self._phase = _APP
            self._deadline = math.inf
        super().on_message_complete()

    def on_response_complete(self) -> None:
        """uvicorn's, with the keep-alive timeout kept as this connection's deadline (the sweep closes
        it) instead of a timer armed after every answer and cancelled by the next request."""
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        elif self._phase == _APP:
            self._phase = _IDLE
            self._deadline = self.loop.time() + self.timeout_keep_alive

    # -- deadlines -------------------------------------------------------------------------------------

    def check_deadline(self, now: float) -> None:
        """Called about once a second by :func:`sweep`; acts when this connection's deadline passed."""
        if now < self._deadline or self._refused or self.transport is None or self.transport.is_closing():
            return
        if self._phase == _IDLE:
            self.transport.close()  # idle between requests for RELAY_KEEPALIVE_TIMEOUT_S
        elif self._phase == _HEAD:
            if self._head_bytes == 0 and not self.url_seen():
                self._refused = True
                self.transport.close()  # the client never said anything: nothing to answer
                return
            timeout = self.bounds.header_timeout_s
            self.refuse(
                408, "request_timeout", f"headers not received within {timeout:g} s (RELAY_HEADER_TIMEOUT_S)"
            )
        elif self._phase == _BODY:
            timeout = self.bounds.body_read_timeout_s
            if self.cycle is not None and not self.cycle.response_started:
                self.cycle.response_started = True  # the application's own answer is not sent any more
                message = f"no request body bytes for {timeout:g} s (RELAY_BODY_READ_TIMEOUT_S)"
                self.refuse(408, "request_timeout", message)
            else:
                self._refused = True
                self.transport.close()

    def url_seen(self) -> bool:
        return bool(getattr(self, "url", b""))

    # -- answers ---------------------------------------------------------------------------------------

    def refuse(self, status: int, code: str, message: str) -> None:
        """Write a complete JSON error answer and close the connection."""
        self._refused = True
        self._deadline = math.inf
        request_id = new_request_id()
        raw_url: bytes = getattr(self, "url", b"") or b""
        path = raw_url.split(b"?", 1)[0][:256].decode("latin-1")
        body = type(self).render(path, status, code, message)
        head = [
            STATUS_LINE[status],
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"x-relay-request-id: " + request_id.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(head) + body)
            self.transport.close()
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        fields = {"request_id": request_id, "status": status, "error": code, "route": "http"}
        log.info("request", extra=fields)


def protocol_class(bounds: Bounds, render: Render) -> type[RelayHttpProtocol]:
    """A protocol class bound to one listener's limits and error shape (uvicorn takes a class)."""
    return type("RelayHttpProtocol", (RelayHttpProtocol,), {"bounds": bounds, "render": staticmethod(render)})


async def sweep(state: ServerState, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Enforce the header and body-read deadlines of every connection of one listener, forever."""
    loop = loop or asyncio.get_running_loop()
    while True:
        await asyncio.sleep(SWEEP_INTERVAL_S)
        now = loop.time()
        for connection in list(state.connections):
            if isinstance(connection, RelayHttpProtocol):
                try:
                    connection.check_deadline(now)
                except Exception:  # pragma: no cover - one broken connection must not stop the sweep
                    log.exception("deadline check failed")
