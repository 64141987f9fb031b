"""The Files API's HTTP face (SPEC §14 Files): a raw-ASGI app mounted at ``/openai/v1/files`` and its
alias ``/v1/files`` on the inference listener.

Routes: ``POST`` (multipart upload), ``GET`` (list), ``GET /{id}``, ``GET /{id}/content`` (streamed),
``DELETE /{id}``. Thin handlers: authenticate like every ``/v1`` route (an upload needs a usable
policy, like a batch submission; reading and deleting one's files needs a valid credential —
``authenticate_owner``), check the parameters, call :class:`relay.batches.files.FileService`, render.
Errors are OpenAI-shaped; a bad parameter is a 400 whose ``param`` names it; an unknown or foreign id
is a 404 ``file not found``, identical in both cases (SPEC §10.8).

The upload is parsed as it arrives (``relay.batches.upload_form``, ``python-multipart``'s streaming
parser): the ``file`` part's bytes go to the store a received chunk at a time, never whole in memory.
Any refusal (bad field, over ``RELAY_BATCH_MAX_BYTES``, malformed body, client gone) aborts the upload
— no row, no bytes.

Invariants. The relay never reads more than ``RELAY_BATCH_MAX_BYTES`` + :data:`MULTIPART_OVERHEAD` of a
request body, whatever it declares (a chunked body is counted as it arrives, fields and boundaries
included), and stops reading at the closing boundary (an epilogue is not read past
:data:`EPILOGUE_LIMIT` bytes or :data:`EPILOGUE_WAIT_S`). A 401, 405 or 413 reads nothing more: it
is answered with ``Connection: close``. Another refusal (a bad field) reads the rest within that
bound, so the client sees the answer, not a reset; an answer sent with body bytes still unread always
carries ``Connection: close``. The ASGI plumbing (joined headers, request ids, ``Allow``) is
``relay.inference.wire``'s.

What it deliberately does not know. Where bytes are stored, ids, clocks, expiry (the service's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import orjson
from python_multipart.multipart import parse_options_header
from starlette.types import Receive, Scope, Send

from relay.adapters import OPENAI, error_body
from relay.auth import authenticate, authenticate_owner
from relay.batches.files import PURPOSES, FileService, file_object
from relay.batches.openai_errors import openai_error
from relay.batches.upload_form import StreamedForm
from relay.domain.credentials import read_credential
from relay.domain.openai_batches import BadParam
from relay.errors import NotFound, PayloadTooLarge, RelayError
from relay.inference.wire import (
    ClientDisconnected,
    error_headers,
    head,
    new_request_id,
    query_params,
    request_headers,
    require_method,
    send_bytes,
)
from relay.snapshot import Snapshot
from relay.store.files import FileRow
from relay.store.outage import unavailable_or_internal

log = logging.getLogger("relay.files")
PREFIXES = ("/openai/v1/files", "/v1/files")
LIST_LIMIT = (1, 10_000)
LIST_PARAMS = ("purpose", "limit", "after", "order")
MULTIPART_OVERHEAD = 64 * 1024  # what a body may exceed the file limit by (boundaries, fields)
EPILOGUE_LIMIT: Final = 1024  # what is still read after the closing boundary (a CRLF, an empty end)
EPILOGUE_WAIT_S: Final = 1.0  # and for how long at most
CLOSE: Final = (b"connection", b"close")
UNREAD_ON: Final = (401, 405, 413)  # refusals that read no more of the body


class FilesApp:
    def __init__(
        self, service: FileService, snapshot: Callable[[], Snapshot], max_bytes: int, prefix: str
    ) -> None:
        self._service = service
        self._snapshot = snapshot
        self._max_bytes = max_bytes
        self._prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request_id = new_request_id()
        method: str = scope["method"]
        parts = [p for p in scope["path"][len(self._prefix) :].split("/") if p]
        headers = request_headers(scope)
        empty = "transfer-encoding" not in headers and headers.get("content-length", "0") == "0"
        body = _Body(receive, self._max_bytes + MULTIPART_OVERHEAD, self._too_large(), empty=empty)
        try:
            credential = read_credential(headers.get("authorization"), headers.get("x-api-key"))
            snap = self._snapshot()
            if not parts:
                require_method(method, "GET", "POST")
                if method == "POST":
                    owner = authenticate(credential, snap).owner
                    row = await self._upload(owner, headers, body)
                    await _json(send, 200, file_object(row), request_id, _unread(body))
                    return
                owner = authenticate_owner(credential, snap)
                await _json(send, 200, await self._list(owner, scope), request_id, _unread(body))
            elif len(parts) == 1:
                require_method(method, "GET", "DELETE")
                owner = authenticate_owner(credential, snap)
                if method == "GET":
                    answer = file_object(await self._service.get(owner, parts[0]))
                else:
                    answer = await self._service.delete(owner, parts[0])
                await _json(send, 200, answer, request_id, _unread(body))
            elif len(parts) == 2 and parts[1] == "content":
                require_method(method, "GET")
                await self._content(send, authenticate_owner(credential, snap), parts[0], request_id)
            else:
                raise NotFound(f"no route for {method} {scope['path']}")
        except RelayError as exc:
            if exc.status not in UNREAD_ON:
                await body.drain()
            extra = error_headers(exc)
            await _json(send, exc.status, openai_error(exc), request_id, [*extra, *_unread(body, extra)])
        except Exception as exc:
            await body.drain()
            status, code, message, extra = unavailable_or_internal(exc, f"files request {request_id}")
            body_out = error_body(OPENAI, status=status, code=code, message=message)
            await send_bytes(
                send, status, body_out, "application/json", request_id, [*extra, *_unread(body, extra)]
            )

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"file is larger than {self._max_bytes} bytes (RELAY_BATCH_MAX_BYTES)")

    async def _upload(self, owner: str, headers: dict[str, str], body: _Body) -> FileRow:
        kind, options = parse_options_header(headers.get("content-type", ""))
        boundary = options.get(b"boundary")
        if kind != b"multipart/form-data" or not boundary:
            raise BadParam("file", "the body must be multipart/form-data with a boundary")
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_bytes + MULTIPART_OVERHEAD:
            raise self._too_large()
        form = StreamedForm(self._service, owner, boundary)
        try:
            while not form.ended and (chunk := await body.next()) is not None:
                await form.feed(chunk)
            if form.ended and not body.ended:
                # The closing boundary: what may follow (a CRLF, the chunked body's end) gets a
                # short grace, bounded in bytes and time; an epilogue beyond it is never read.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(body.drain(EPILOGUE_LIMIT), EPILOGUE_WAIT_S)
            return await form.finish()
        except BaseException:
            await form.abort()
            raise

    async def _list(self, owner: str, scope: Scope) -> dict[str, Any]:
        query = query_params(scope)
        for name, values in query.items():
            if name not in LIST_PARAMS:
                raise BadParam(name, f"unknown parameter {name!r}")
            if len(values) > 1:
                raise BadParam(name, f"{name} is given more than once")
        one = {name: values[0] for name, values in query.items()}
        purpose = one.get("purpose")
        if purpose is not None and purpose not in PURPOSES:
            raise BadParam("purpose", "purpose must be batch or batch_output")
        raw_limit = one.get("limit", str(LIST_LIMIT[1]))
        if not raw_limit.isdigit() or not LIST_LIMIT[0] <= int(raw_limit) <= LIST_LIMIT[1]:
            raise BadParam("limit", f"limit must be an integer from {LIST_LIMIT[0]} to {LIST_LIMIT[1]}")
        order = one.get("order", "desc")
        if order not in ("asc", "desc"):
            raise BadParam("order", "order must be asc or desc")
        after = one.get("after")
        if after == "":
            raise BadParam("after", "after must be a file id")
        sorted_as: Literal["asc", "desc"] = "asc" if order == "asc" else "desc"
        page = await self._service.list(
            owner, purpose=purpose, after=after, order=sorted_as, limit=int(raw_limit)
        )
        data = [file_object(row) for row in page.files]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": page.has_more,
        }

    async def _content(self, send: Send, owner: str, file_id: str, request_id: str) -> None:
        row, chunks = await self._service.content(owner, file_id)
        try:
            first = await anext(chunks, b"")
        except FileNotFoundError:
            raise RelayError(
                "the file's bytes are not on this replica (RELAY_BATCH_PAYLOAD_DIR is not shared)",
                code="file_unavailable",
                status=503,
            ) from None
        length = (b"content-length", str(row.bytes).encode())
        await send(head(200, "application/octet-stream", request_id, [length]))
        try:
            await send({"type": "http.response.body", "body": first, "more_body": True})
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.info("content stream of %s ended early: client disconnected", file_id)
        except Exception:
            # Headers are out: the body is short of its content-length, never a false "complete".
            log.exception("content stream of %s failed", file_id)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()


class _Body:
    """The request body as it arrives, remembering whether it has ended, and refusing (``too_large``)
    to receive more than ``limit`` bytes in all."""

    def __init__(self, receive: Receive, limit: int, too_large: RelayError, *, empty: bool) -> None:
        self._receive = receive
        self._limit, self._too_large = limit, too_large
        self.received = 0
        self.ended = empty  # a request without a body has nothing to read

    async def next(self) -> bytes | None:
        """The next non-empty chunk, or None at the end; a disconnect is a refused upload."""
        while not self.ended:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.ended = True
                raise ClientDisconnected
            self.ended = not message.get("more_body", False)
            chunk: bytes = message.get("body", b"")
            self.received += len(chunk)
            if self.received > self._limit:
                raise self._too_large
            if chunk:
                return chunk
        return None

    async def drain(self, limit: int | None = None) -> None:
        """Read and drop the rest: up to ``limit`` more bytes, and never past the body's own bound."""
        stop = self._limit if limit is None else min(self._limit, self.received + limit)
        with contextlib.suppress(RelayError):
            while self.received <= stop and await self.next() is not None:
                pass


def _unread(body: _Body, sent: Sequence[tuple[bytes, bytes]] = ()) -> list[tuple[bytes, bytes]]:
    """``Connection: close`` when body bytes are left unread (and the answer does not say so already)."""
    return [] if body.ended or CLOSE in sent else [CLOSE]


async def _json(
    send: Send,
    status: int,
    payload: dict[str, Any],
    request_id: str,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    await send_bytes(send, status, orjson.dumps(payload), "application/json", request_id, extra)
