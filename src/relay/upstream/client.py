"""The one HTTP client Relay uses to call providers: pooled HTTP/1.1 connections, timeouts, errors.

Relay's own client rather than a general one (aiohttp, httpx, pyreqwest were measured): every call is
one request Relay built itself and one answer read whole or streamed, so the client is a connection
pool in front of :class:`~relay.upstream.connection.Connection`. It is a plain pipe: no redirect
followed, no decompression, no proxy from the environment, no header added but ``host`` and
``content-length``. TLS uses the system's trust store (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` point it
elsewhere) and verifies the host name. A provider's addresses are resolved once per ``DNS_TTL_S`` and
tried in turn.

A provider closes idle connections on its own schedule (uvicorn, and so vLLM's server, after 5 s), and
a busy event loop can read that close late. A request written on such a connection fails with 502 and
counts against the key. So a connection idle for more than ``IDLE_CHECK_S`` is asked first whether the
provider hung up or wrote anything (its kernel already holds the FIN, reset or bytes), and one that did
is dropped for a new connection. A request is never sent twice: a connection that breaks under a
request fails that request, and the key pool decides what happens next.

Errors cross this boundary as :class:`UpstreamConnectionError` (the request could not be sent or the
answer could not be read: the key pool treats it like a 5xx) or :class:`UpstreamTimeout`; their
messages name what failed by its class, never the URL. Answers are handed back unread so the caller
can decide from the status alone whether to fail over before a byte reaches its client. A call
cancelled, an answer discarded or a stream left midway closes its connection at once, so a provider
stops generating what nobody will read.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from functools import partial
from typing import Any, Final
from urllib.parse import urlsplit

from relay.errors import RelayError

from .connection import Broken, Connection, Silent

KEEPALIVE_S: Final = 60.0
"""An idle pooled connection older than this is closed instead of reused."""

IDLE_CHECK_S: Final = 1.0
"""A pooled connection idle for longer is asked whether the provider closed it before it is reused."""

DNS_TTL_S: Final = 300.0
"""How long a provider's resolved addresses are reused for new connections (a burst of new connections
to one provider is one lookup, not one each through the executor's few threads)."""

_TARGETS_MAX: Final = 4096


class UpstreamConnectionError(RelayError):
    status = 502
    code = "upstream_connection_error"


class UpstreamTimeout(RelayError):
    status = 504
    code = "upstream_timeout"


class ResponseHeaders(Mapping[str, str]):
    """An answer's headers as received; names match case-insensitively, the first of a repeated one
    wins. Values are decoded only when asked for."""

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw  # names already lower-cased by the connection

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        wanted = key.lower().encode("latin-1")
        for name, value in self._raw:
            if name == wanted:
                return value.decode("latin-1").strip()
        return default

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return str(value)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(name.decode("latin-1") for name, _ in self._raw))

    def __len__(self) -> int:
        return len({name for name, _ in self._raw})


class UpstreamResponse:
    """An answer whose head arrived; its body is read with :meth:`read` or :meth:`chunks`, once, or
    dropped with :meth:`discard`."""

    __slots__ = ("_connection", "_open", "_pool", "headers", "status")

    def __init__(self, status: int, headers: ResponseHeaders, connection: Connection, pool: Upstream):
        self.status = status
        self.headers = headers
        self._connection = connection
        self._pool = pool
        self._open = True

    async def read(self) -> bytes:
        connection = self._connection
        try:
            if connection.complete:  # the whole answer came with its head: nothing to wait for
                return await connection.take()
            pieces = []
            while piece := await connection.take():
                pieces.append(piece)
            return b"".join(pieces)
        except (Silent, Broken) as exc:
            raise _failed(exc, "reading") from None
        finally:
            self._finish()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives: whatever bytes came since the last piece (SSE passes through as it
        is sent, never re-framed)."""
        connection = self._connection
        try:
            while piece := await connection.take():
                yield piece
        except (Silent, Broken) as exc:
            raise _failed(exc, "streaming") from None
        finally:
            self._finish()

    def discard(self) -> None:
        """Drop an answer that will not be forwarded (a failover status): its connection is closed."""
        if self._open:
            self._open = False
            self._pool.drop(self._connection)

    def _finish(self) -> None:
        if self._open:
            self._open = False
            self._pool.finished(self._connection)


def _failed(exc: Silent | Broken, doing: str) -> UpstreamTimeout | UpstreamConnectionError:
    """The error a body read ends with: the provider fell silent, or the connection broke."""
    if isinstance(exc, Silent):
        return UpstreamTimeout(f"upstream timed out while {doing}")
    return UpstreamConnectionError(f"upstream connection failed while {doing}: {exc}")


class Upstream:
    def __init__(self, *, timeout_s: float, connect_timeout_s: float = 10.0) -> None:
        self._read_timeout = timeout_s
        self._connect_timeout = connect_timeout_s
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._connections: set[Connection] = set()
        self._targets: dict[str, tuple[tuple[str, str, int], str]] = {}
        self._addresses: dict[tuple[str, int], tuple[float, list[tuple[Any, ...]]]] = {}
        self._tls: ssl.SSLContext | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tls = ssl.create_default_context()
        self._tls.set_alpn_protocols(["http/1.1"])

    async def close(self) -> None:
        for connection in list(self._connections):
            connection.abort()
        self._connections.clear()
        self._idle.clear()

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        return await self._exchange("POST", url, headers, body)

    async def get(self, url: str, headers: Mapping[str, str]) -> UpstreamResponse:
        """A GET with the same errors as :meth:`post` (provider batch offload polls and reads results)."""
        return await self._exchange("GET", url, headers, None)

    async def _exchange(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> UpstreamResponse:
        assert self._loop is not None, "Upstream.start() runs at boot"
        origin, head = self._head(method, url, headers, body)
        connection = self._pooled(origin) or await self._connect(origin)
        try:
            connection.send(head, body)
            await connection.head()
        except Silent:
            self.drop(connection)
            raise UpstreamTimeout(f"upstream did not answer within {self._read_timeout:g}s") from None
        except Broken as exc:
            self.drop(connection)
            raise UpstreamConnectionError(f"upstream connection failed: {exc}") from None
        except BaseException:  # cancelled: hang up now, the answer will not be read
            self.drop(connection)
            raise
        return UpstreamResponse(connection.status, ResponseHeaders(connection.headers), connection, self)

    def _head(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[tuple[str, str, int], bytes]:
        target = self._targets.get(url)
        if target is None:
            target = self._target(url)
        origin, request_line = target
        lines = [method, request_line]
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError("a header name or value holds a line break")
            lines.append(f"{name}: {value}\r\n")
        if body is not None:
            lines.append(f"content-length: {len(body)}\r\n")
        lines.append("\r\n")
        return origin, "".join(lines).encode()

    def _target(self, url: str) -> tuple[tuple[str, str, int], str]:
        """(origin, the rest of the request line and the host header) of a URL, remembered."""
        parts = urlsplit(url)
        scheme, host = parts.scheme, parts.hostname
        if scheme not in ("http", "https") or not host:
            raise UpstreamConnectionError("upstream connection failed: InvalidURL")
        port = parts.port or (443 if scheme == "https" else 80)
        path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        target = ((scheme, host, port), f" {path} HTTP/1.1\r\nhost: {authority}\r\n")
        if len(self._targets) >= _TARGETS_MAX:
            self._targets.clear()
        self._targets[url] = target
        return target

    def _pooled(self, origin: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = self._loop.time()  # type: ignore[union-attr]
        while idle:
            connection = idle.pop()
            idle_for = now - connection.idle_since
            if (
                connection.closed
                or idle_for > KEEPALIVE_S
                or (idle_for > IDLE_CHECK_S and connection.hung_up())
            ):
                self.drop(connection)
                continue
            return connection
        return None

    async def _connect(self, origin: tuple[str, str, int]) -> Connection:
        scheme, host, port = origin
        loop = self._loop
        assert loop is not None
        tls = self._tls if scheme == "https" else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                sock = await self._socket(host, port)
                _, connection = await loop.create_connection(
                    partial(Connection, loop, origin, self._read_timeout),
                    sock=sock,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            raise UpstreamTimeout(f"upstream did not answer within {self._connect_timeout:g}s") from None
        except OSError as exc:  # refused, unreachable, DNS, TLS verification
            raise UpstreamConnectionError(f"upstream connection failed: {type(exc).__name__}") from None
        self._connections.add(connection)
        return connection

    async def _socket(self, host: str, port: int) -> socket.socket:
        """A socket connected to the provider: each address it resolved to in turn, as
        ``create_connection`` would, from addresses remembered for ``DNS_TTL_S``."""
        loop = self._loop
        assert loop is not None
        now = loop.time()
        known = self._addresses.get((host, port))
        if known is None or known[0] <= now:
            addresses = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            if len(self._addresses) >= _TARGETS_MAX:
                self._addresses.clear()
            known = self._addresses[(host, port)] = (now + DNS_TTL_S, addresses)
        failure: OSError = OSError(f"{host} resolved to no address")
        for family, kind, proto, _, address in known[1]:
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, address)
                return sock
            except OSError as exc:
                sock.close()
                failure = exc
            except BaseException:  # cancelled, timed out
                sock.close()
                raise
        self._addresses.pop((host, port), None)  # none answered: resolve again next time
        raise failure

    def finished(self, connection: Connection) -> None:
        """An answer read to its end, or left: pool its connection if it can carry another exchange."""
        if connection.reusable():
            connection.recycle(self._loop.time())  # type: ignore[union-attr]
            idle = self._idle.get(connection.origin)
            if idle is None:
                self._idle[connection.origin] = [connection]
            else:
                idle.append(connection)
        else:
            self.drop(connection)

    def drop(self, connection: Connection) -> None:
        connection.abort()
        self._connections.discard(connection)
