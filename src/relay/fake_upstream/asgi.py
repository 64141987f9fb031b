"""Minimal raw-ASGI helpers: no framework, because the fake must never be a benchmark's bottleneck."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON_TYPE = (b"content-type", b"application/json")
SSE_HEADERS: Headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body"):
        return bytes(body)  # the common case: the whole body arrived in one message
    chunks = [body]
    while message.get("more_body"):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


async def send_bytes(send: Send, status: int, body: bytes, headers: Headers | None = None) -> None:
    all_headers: Headers = [JSON_TYPE, (b"content-length", str(len(body)).encode())]
    if headers:
        all_headers.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, payload: Any) -> None:
    await send_bytes(send, status, orjson.dumps(payload))


async def drop_connection(send: Send, receive: Receive) -> None:
    """Closes the TCP connection at once, before or in the middle of a response.

    ASGI has no message for this, and uvicorn answers 500 when an app returns or raises before starting
    a response, so we close the transport of uvicorn's request cycle (``send`` is its bound method).
    Waiting for ``http.disconnect`` afterwards keeps uvicorn from logging "returned without response".
    Data already written (e.g. the first stream events) is flushed before the FIN.
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        # Not uvicorn: an exception is the closest thing (uvicorn-like servers then close or answer 500).
        raise ConnectionAbortedError("fake upstream: dropping the connection")
    transport.close()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(2.0):
            while (await receive())["type"] != "http.disconnect":
                pass


async def lifespan(receive: Receive, send: Send) -> None:
    """Acknowledges lifespan events, for servers that run the app with lifespan on."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
