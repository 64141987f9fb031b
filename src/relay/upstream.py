"""The one HTTP client Relay uses to call providers: pooled connections, timeouts, errors mapped here.

aiohttp was chosen over httpx for the hot path: on this project's benchmark it costs markedly less
CPU per proxied request (see docs/benchmarks.md). One ``ClientSession`` per process keeps connections
alive per host; nothing here knows about keys, shapes or breakers.

Errors cross this boundary as :class:`UpstreamConnectionError` (the request could not be sent or the
response could not be read: the key pool treats it like a 5xx) or :class:`UpstreamTimeout`. Responses
are handed back unread so the caller can decide, from the status alone, whether to fail over before
a single byte reaches its client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp

from relay.errors import RelayError


class UpstreamConnectionError(RelayError):
    status = 502
    code = "upstream_connection_error"


class UpstreamTimeout(RelayError):
    status = 504
    code = "upstream_timeout"


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: Mapping[str, str]
    _response: aiohttp.ClientResponse

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except TimeoutError:
            raise UpstreamTimeout("upstream timed out while sending its answer") from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectionError(
                f"upstream connection failed while reading: {type(exc).__name__}"
            ) from None
        finally:
            self._response.release()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, chunk by chunk (SSE passes through without buffering)."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except TimeoutError:
            raise UpstreamTimeout("upstream timed out while streaming") from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectionError(f"upstream stream broke: {type(exc).__name__}") from None
        finally:
            self._response.release()

    def discard(self) -> None:
        """Drop a response we will not forward (a failover status); the connection is not reused."""
        self._response.close()


class Upstream:
    def __init__(
        self, *, timeout_s: float, connect_timeout_s: float = 10.0, max_connections: int = 0
    ) -> None:
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout_s, sock_read=timeout_s)
        self._total_s = timeout_s
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._max_connections, keepalive_timeout=60, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def post(self, url: str, headers: Mapping[str, str], body: bytes) -> UpstreamResponse:
        assert self._session is not None, "Upstream.start() runs at boot"
        try:
            response = await self._session.post(url, data=body, headers=dict(headers), allow_redirects=False)
        except TimeoutError:
            raise UpstreamTimeout(f"upstream did not answer within {self._total_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectionError(f"upstream connection failed: {type(exc).__name__}") from None
        return UpstreamResponse(response.status, response.headers, response)

    async def get(self, url: str, headers: Mapping[str, str]) -> UpstreamResponse:
        """A GET with the same errors as :meth:`post` (provider batch offload polls and reads results)."""
        assert self._session is not None, "Upstream.start() runs at boot"
        try:
            response = await self._session.get(url, headers=dict(headers), allow_redirects=False)
        except TimeoutError:
            raise UpstreamTimeout(f"upstream did not answer within {self._total_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectionError(f"upstream connection failed: {type(exc).__name__}") from None
        return UpstreamResponse(response.status, response.headers, response)
