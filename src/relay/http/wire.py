"""ASGI plumbing shared by every raw-ASGI app of the inference port: the live plane, the batch API and
the batch façades (§14, §15). Read a bounded body, read headers and the query, mint a request id,
send a response (JSON, bytes, a streamed head), refuse a method with ``Allow``.

Kept apart from the handlers so they read as the request's story, not as protocol details. It knows no
route, no error shape (``relay.http.errors`` renders those) and no service.

Invariants: a repeated header's values are joined with ", " (RFC 9110) everywhere; request ids are
128 random bits in hex, the same on every app; a 405 always carries ``Allow``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

import orjson
from starlette.types import Receive, Scope, Send

from relay.domain.ids import random_hex
from relay.errors import PayloadTooLarge, RelayError


class ClientDisconnected(RelayError):
    """The body never arrived whole: the client went away (or the server closed a stalled upload,
    ``RELAY_BODY_READ_TIMEOUT_S``). Nobody reads the answer; handlers stop without acting on a part."""

    def __init__(self) -> None:
        super().__init__(
            "client disconnected before the body was complete", code="client_disconnected", status=499
        )


class MethodNotAllowed(RelayError):
    """405 with the methods the route allows (sent as ``Allow``)."""

    def __init__(self, *allowed: str) -> None:
        super().__init__(f"use {' or '.join(allowed)}", code="method_not_allowed", status=405)
        self.allowed = allowed


def new_request_id() -> str:
    """128 random bits, as ``uuid4().hex`` spells them (the ``X-Relay-Request-ID``), from the pooled
    entropy the usage event ids use: one ``getrandom`` call per 256 requests, not one per request."""
    return random_hex(16)


def require_method(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise MethodNotAllowed(*allowed)


def query_params(scope: Scope) -> dict[str, list[str]]:
    """The query string's parameters (blank values kept: ``?limit=`` is a value, and an error)."""
    return parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


def request_headers(scope: Scope) -> dict[str, str]:
    """Lower-cased header names to values; a repeated header's values are joined with ", " (RFC 9110),
    so e.g. several ``anthropic-beta`` headers all reach the upstream."""
    out: dict[str, str] = {}
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


async def read_body(
    receive: Receive,
    scope: Scope,
    limit: int,
    *,
    what: str = "request body",
    setting: str = "RELAY_MAX_REQUEST_BYTES",
) -> bytes:
    """The whole request body, refusing (413) anything over ``limit`` before reading it all; a
    disconnect before the end raises :class:`ClientDisconnected` (a partial body is never acted on)."""
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise _too_large(what, limit, setting)
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(what, limit, setting)
            parts.append(chunk)
        if not message.get("more_body", False):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(what: str, limit: int, setting: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"{what} is larger than {limit} bytes ({setting})")


def head(
    status: int, content_type: str, request_id: str, extra: Sequence[tuple[bytes, bytes]] = ()
) -> dict[str, Any]:
    headers = [
        (b"content-type", content_type.encode("latin-1")),
        (b"x-relay-request-id", request_id.encode()),
    ]
    headers.extend(extra)
    return {"type": "http.response.start", "status": status, "headers": headers}


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    request_id: str,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    await send(head(status, content_type, request_id, [(b"content-length", str(len(body)).encode()), *extra]))
    await send({"type": "http.response.body", "body": body})


async def json_response(send: Send, status: int, payload: Any, request_id: str) -> None:
    await send_bytes(send, status, orjson.dumps(payload), "application/json", request_id)
