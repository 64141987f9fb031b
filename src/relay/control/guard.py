"""The control plane's front door (SPEC §11, §7): what is checked before FastAPI sees a request.

In order, before any body byte is read:
0. an inference or batch path (``/v1/…``, ``/openai/…``, ``/anthropic/…``) → 404 ``wrong_plane`` saying
   that this is the control plane and where the inference plane listens (``RELAY_PORT`` on the host the
   caller named): an SDK pointed at the wrong port shows that sentence instead of a bare "Not Found";
1. the admin bearer, on every ``/api`` route except the open ones (``/api/openapi.json``,
   ``/api/docs…``) and the session routes (``/api/auth/*``, which authenticate a user's session
   themselves) → 401; so an unauthenticated caller cannot make the server read, buffer or parse a body;
2. ``Content-Length`` over the route's limit → 413 (``RELAY_CONTROL_MAX_REQUEST_BYTES``; the login
   route takes at most ``LOGIN_MAX_BYTES``);
then, reading the body: 413 as soon as it grows past the limit (chunked uploads included), and the JSON
bounds of SPEC §1 (``RELAY_MAX_JSON_DEPTH``, no lone surrogate) → 400 ``invalid_json`` naming the depth
or field. The body is then handed to FastAPI as read (its own parse stays the one that validates).

Every answer gets ``X-Relay-Request-ID``, the ``request_id`` of the audit entries the request appends
(the guard opens the request's audit context: that id, the client's address and user agent); an
exception that escapes the app answers a JSON 500 (or, if the response had started, ends it) instead
of uvicorn's text/plain. Early refusals close the connection,
so a client that keeps uploading is not read to the end.

Bodies outside ``/api`` (the dashboard's forms under ``/ui``) are left to the dashboard, which reads
them with a small cap of its own while streaming.

What it deliberately does not know: routes beyond their paths, sessions, the catalog.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from relay.adapters.json_codec import JsonRefused, loads_input
from relay.control.audit.context import request_scope
from relay.crypto.sealing import constant_time_equal
from relay.domain.credentials import KEY_PREFIX
from relay.errors import RelayError, Unauthenticated
from relay.http.errors import control_error_body
from relay.http.wire import ClientDisconnected, new_request_id, read_body

log = logging.getLogger("relay.control")

LOGIN_PATH = "/api/auth/login"
LOGIN_MAX_BYTES = 4096
"""An email and a password fit in far less; argon2 is never asked to hash megabytes."""

RELAY_KEY_REFUSED = (
    "invalid admin token: this is a relay key, which works on the inference plane only; the control "
    "plane needs RELAY_ADMIN_TOKEN"
)

INFERENCE_PREFIXES = ("/v1/", "/openai/", "/anthropic/")
"""Paths only the inference plane serves (live inference, the batch APIs and their façades)."""

OPEN_PATHS = frozenset(("/api/openapi.json",))
OPEN_PREFIXES = ("/api/docs", "/api/auth/")
BODY_METHODS = frozenset(("POST", "PUT", "PATCH", "DELETE"))


class ControlGuard:
    def __init__(
        self, app: ASGIApp, *, admin_token: str, max_bytes: int, max_json_depth: int, inference_port: int
    ) -> None:
        self.app = app
        self._inference_port = inference_port
        self._token = admin_token
        self._max_bytes = max_bytes
        self._max_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        rid = request_id.encode()
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), (b"x-relay-request-id", rid)]}
            await send(message)

        try:
            replay = await self._admit(scope, receive)
        except ClientDisconnected:
            return
        except RelayError as exc:
            await _answer(send_with_id, exc.status, control_error_body(exc.code, exc.message), close=True)
            return
        client = scope.get("client")
        agent = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"user-agent"), None)
        try:
            # The audit entries this request appends carry the id sent back (SPEC §21).
            with request_scope(request_id=request_id, ip=client[0] if client else None, user_agent=agent):
                await self.app(scope, replay or receive, send_with_id)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], scope["path"][:256])
            if not started:
                await _answer(
                    send_with_id, 500, control_error_body("internal_error", "internal error"), close=True
                )

    async def _admit(self, scope: Scope, receive: Receive) -> Receive | None:
        """Checks 1–3; a ``receive`` that replays the body read, or None when none was read."""
        path: str = scope["path"]
        if path == "/v1" or path.startswith(INFERENCE_PREFIXES):
            raise wrong_plane(scope, self._inference_port)
        if path.startswith("/api/") and path not in OPEN_PATHS and not path.startswith(OPEN_PREFIXES):
            self._check_admin(scope)
        if scope["method"] not in BODY_METHODS or not path.startswith("/api/"):
            return None  # the dashboard's forms (/ui) are read by the dashboard, with its own 16 KiB cap
        limit, setting = (
            (LOGIN_MAX_BYTES, "login bodies")
            if path == LOGIN_PATH
            else (self._max_bytes, "RELAY_CONTROL_MAX_REQUEST_BYTES")
        )
        body = await read_body(receive, scope, limit, setting=setting)
        if body.strip():
            try:
                loads_input(body, self._max_depth, what="body")
            except JsonRefused as exc:
                raise RelayError(str(exc), code="invalid_json", status=400) from None
            except ValueError:
                pass  # not JSON at all: FastAPI answers its own 400 invalid_json
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()  # after the body: the disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay

    def _check_admin(self, scope: Scope) -> None:
        value = ""
        for name, raw in scope["headers"]:
            if name == b"authorization":
                value = raw.decode("latin-1")
                break
        scheme, _, credential = value.partition(" ")
        if scheme.lower() != "bearer" or not credential.strip():
            raise Unauthenticated("missing admin bearer token")
        if not constant_time_equal(credential.strip(), self._token):
            if credential.strip().startswith(KEY_PREFIX):
                raise Unauthenticated(RELAY_KEY_REFUSED)
            raise Unauthenticated("invalid admin token")


def wrong_plane(scope: Scope, inference_port: int) -> RelayError:
    """The answer to an inference or batch call sent to the control port: where to send it instead.
    The host is the one the caller used (``Host``, reduced to a host name; a proxy in front may map
    ports differently, so the setting is named too)."""
    host = ""
    for name, raw in scope["headers"]:
        if name == b"host":
            host = raw.decode("latin-1")
            break
    hostname = _HOST_NAME.match(host)
    where = f"http://{hostname.group(0)}:{inference_port}" if hostname else f"port {inference_port}"
    path = str(scope["path"])[:200]
    return RelayError(
        f"this is Relay's control plane (admin API, dashboard, metrics): {scope['method']} {path} is "
        f"served by the inference plane, {where}{path} (RELAY_PORT, {inference_port})",
        code="wrong_plane",
        status=404,
    )


_HOST_NAME = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]{1,253})(?=:\d{1,5}$|$)")


async def _answer(send: Send, status: int, body: bytes, *, close: bool = False) -> None:
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
