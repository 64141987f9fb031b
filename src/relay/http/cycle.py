"""One request's ASGI cycle on Relay's protocol: uvicorn's ``RequestResponseCycle`` with a leaner ``send``.

Why. ``send`` runs twice per answer on every request; uvicorn's walks its per-second default headers
(``date``, ``server``) through the same checks as the application's, and writes a response's head and
body in two sends (two wake-ups of the client on a socket). This one writes the default headers as one
block, built once per block (``_default_block``), and holds a head that announces a
``content-length`` until the first body bytes, which leave with it in one send (up to 64 KiB; a larger
body is not copied to save a send). A stream's head (chunked) and a ``HEAD`` answer leave at once.

What it keeps from uvicorn, exactly: the checks on the application's header names and values, the
first ``content-length`` wins, chunked framing when neither length nor ``transfer-encoding`` is given
(except ``HEAD``, 204 and 304), ``connection: close`` ends keep-alive, a body longer or shorter than
its length is an error, write back-pressure (``flow.drain``), and nothing is written after a
disconnect. The cycle's other methods (``receive``, ``run_asgi``) are uvicorn's.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)
from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

JOIN_MAX = 64 * 1024
"""The largest first body chunk a held head is joined with (a copy; a larger one is sent after it)."""

_default_list: list[tuple[bytes, bytes]] | None = None
_default_bytes = b""


def _default_block(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The server's default header lines, joined once per list: uvicorn's server replaces the list
    each second (a new ``date``), so identity says when to join again."""
    global _default_list, _default_bytes
    if headers is not _default_list:
        _default_bytes = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        _default_list = headers
    return _default_bytes


class RelayCycle(RequestResponseCycle):
    _held: bytes | None = None

    async def send(self, message: Any) -> None:
        if self.flow.write_paused and not self.disconnected:
            await self.flow.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected ASGI message 'http.response.start', but got '{kind}'.")
            self._start(message)
            return
        if self.response_complete:
            raise RuntimeError(f"Unexpected ASGI message '{kind}' sent, after response already completed.")
        if kind != "http.response.body":
            raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
        body: bytes = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            if body:
                end = b"" if more_body else b"0\r\n\r\n"
                self.transport.write(b"%x\r\n%b\r\n%b" % (len(body), body, end))
            elif not more_body:
                self.transport.write(b"0\r\n\r\n")
        else:
            size = len(body)
            if size > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= size
            held = self._held
            if held is None:
                self.transport.write(body)
            else:
                self._held = None
                if size > JOIN_MAX:
                    self.transport.write(held)
                    self.transport.write(body)
                else:
                    self.transport.write(held + body)  # the head leaves with the first body bytes
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()

    def _start(self, message: Any) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        status: int = message["status"]
        if self.access_log:
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(self.scope),
                self.scope["method"],
                get_path_with_query_string(self.scope),
                self.scope["http_version"],
                status,
            )
        content = [STATUS_LINE[status], _default_block(self.default_headers)]
        has_connection_close = False
        for name, value in message.get("headers", ()):
            if HEADER_RE.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            name = name.lower()
            if name == b"content-length" and self.chunked_encoding is None:
                self.expected_content_length = int(value.decode())
                self.chunked_encoding = False
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                self.expected_content_length = 0
                self.chunked_encoding = True
            elif name == b"connection" and b"close" in [t.lower().strip() for t in value.split(b",")]:
                self.keep_alive = False
                has_connection_close = True
            content.append(name + b": " + value + b"\r\n")
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        head_only = self.scope["method"] == "HEAD"
        if self.chunked_encoding is None and not head_only and status not in (204, 304):
            self.chunked_encoding = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        if self.chunked_encoding is False and not head_only:
            self._held = b"".join(content)  # leaves with the first body bytes
        else:
            self.transport.write(b"".join(content))
