"""The Files API's HTTP face (SPEC §14 Files): a raw-ASGI app mounted at ``/openai/v1/files`` and its
alias ``/v1/files`` on the inference listener.

Routes: ``POST`` (multipart upload), ``GET`` (list), ``GET /{id}``, ``GET /{id}/content`` (streamed),
``DELETE /{id}``. Thin handlers: authenticate like every ``/v1`` route (an upload needs a usable
policy, like a batch submission; reading and deleting one's files needs a valid credential —
``authenticate_owner``), check the parameters, call :class:`relay.batches.files.FileService`, render.
Errors are OpenAI-shaped; a bad parameter is a 400 whose ``param`` names it; an unknown or foreign id
is a 404 ``file not found``, identical in both cases (SPEC §10.8).

The upload is parsed as it arrives (``python-multipart``'s streaming parser): the ``file`` part's bytes
go to the store a received chunk at a time, never whole in memory. Any refusal (bad field, over
``RELAY_BATCH_MAX_BYTES``, malformed body, client gone) aborts the upload — no row, no bytes.

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
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.types import Receive, Scope, Send

from relay.adapters import OPENAI, error_body
from relay.auth import authenticate, authenticate_owner
from relay.batches.files import PURPOSES, FileService, Upload, file_object
from relay.domain.credentials import read_credential
from relay.errors import InvalidRequest, NotFound, PayloadTooLarge, RelayError
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
FIELD_LIMIT = 1024  # the longest non-file field value
FILENAME_LIMIT = 255
SECONDS_RANGE = (3600, 2_592_000)
LIST_LIMIT = (1, 10_000)
LIST_PARAMS = ("purpose", "limit", "after", "order")
MULTIPART_OVERHEAD = 64 * 1024  # what a body may exceed the file limit by (boundaries, fields)
EPILOGUE_LIMIT: Final = 1024  # what is still read after the closing boundary (a CRLF, an empty end)
EPILOGUE_WAIT_S: Final = 1.0  # and for how long at most
CLOSE: Final = (b"connection", b"close")
UNREAD_ON: Final = (401, 405, 413)  # refusals that read no more of the body


class BadParam(InvalidRequest):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


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
            await _json(send, exc.status, _error(exc), request_id, [*extra, *_unread(body, extra)])
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
        form = _StreamedForm(self._service, owner, boundary)
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


class _StreamedForm:
    """The multipart upload being parsed: the parser's callbacks queue events per received chunk,
    which are then applied in order (the file part's bytes to the upload, small fields to memory)."""

    def __init__(self, service: FileService, owner: str, boundary: bytes) -> None:
        self._service, self._owner = service, owner
        self._events: list[tuple[str, bytes]] = []
        self._parser = MultipartParser(boundary, self._callbacks())
        self._header_name = b""
        self._headers: dict[bytes, bytes] = {}
        self._part: str | None = None  # the current part's field name
        self._value = bytearray()
        self.fields: dict[str, str] = {}
        self.upload: Upload | None = None
        self.filename = ""
        self._file_done = False
        self.ended = False  # the closing boundary was parsed

    def _callbacks(self) -> Any:
        ev = self._events

        def data_of(kind: str) -> Callable[[bytes, int, int], None]:
            return lambda data, start, end: ev.append((kind, bytes(data[start:end])))

        return {
            "on_part_begin": lambda: ev.append(("begin", b"")),
            "on_header_field": data_of("hfield"),
            "on_header_value": data_of("hvalue"),
            "on_header_end": lambda: ev.append(("hend", b"")),
            "on_headers_finished": lambda: ev.append(("headers", b"")),
            "on_part_data": data_of("data"),
            "on_part_end": lambda: ev.append(("end", b"")),
            "on_end": lambda: ev.append(("done", b"")),
        }

    async def feed(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except MultipartParseError:
            raise BadParam("file", "the multipart body is malformed") from None
        events, self._events[:] = list(self._events), []
        for kind, data in events:
            await self._apply(kind, data)

    async def _apply(self, kind: str, data: bytes) -> None:
        if kind == "begin":
            self._headers, self._header_name, self._part = {}, b"", None
        elif kind == "hfield":
            self._header_name += data
        elif kind == "hvalue":
            name = self._header_name.lower()
            self._headers[name] = self._headers.get(name, b"") + data
        elif kind == "hend":
            self._header_name = b""
        elif kind == "headers":
            await self._begin_part()
        elif kind == "data":
            if self._part == "file":
                assert self.upload is not None
                await self.upload.write(data)
            else:
                self._value += data
                if len(self._value) > FIELD_LIMIT:
                    raise BadParam(self._part or "", f"{self._part} is longer than {FIELD_LIMIT} bytes")
        elif kind == "end":
            self._end_part()
        elif kind == "done":
            self.ended = True

    async def _begin_part(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            raise BadParam("file", "a multipart part has no name")
        if name in self.fields or (name == "file" and self.upload is not None):
            raise BadParam(name, f"{name} is given more than once")
        self._part, self._value = name, bytearray()
        if name == "file":
            filename = options.get(b"filename", b"file").decode("utf-8", "replace").rsplit("/", 1)[-1]
            if len(filename) > FILENAME_LIMIT:
                raise BadParam("file", f"the filename is longer than {FILENAME_LIMIT} characters")
            self.filename = filename or "file"
            self.upload = await self._service.begin_upload(self._owner)
        elif name not in ("purpose", "expires_after[anchor]", "expires_after[seconds]"):
            raise BadParam(name, f"unknown field {name!r}")

    def _end_part(self) -> None:
        if self._part == "file":
            self._file_done = True
        elif self._part is not None:
            value = self._value.decode("utf-8", "replace")
            self.fields[self._part] = value
            _check_field(self._part, value)  # refused as soon as it arrives, before any file bytes
        self._part = None

    async def finish(self) -> FileRow:
        if not self.ended:
            if self.upload is None:
                raise BadParam("file", "file is required")
            raise BadParam("file", "the multipart body ended early")
        if self.upload is None or not self._file_done:
            raise BadParam("file", "file is required")
        if "purpose" not in self.fields:
            raise BadParam("purpose", "purpose is required")
        anchor = self.fields.get("expires_after[anchor]")
        seconds = self.fields.get("expires_after[seconds]")
        if (anchor is None) != (seconds is None):
            missing = "expires_after[seconds]" if seconds is None else "expires_after[anchor]"
            raise BadParam(missing, f"{missing} is required with expires_after")
        return await self.upload.finish(
            purpose=self.fields["purpose"],
            filename=self.filename,
            expires_after_s=None if seconds is None else int(seconds),
        )

    async def abort(self) -> None:
        if self.upload is not None:
            await self.upload.abort()


def _check_field(name: str, value: str) -> None:
    if name == "purpose" and value != "batch":
        raise BadParam("purpose", "purpose must be batch")
    if name == "expires_after[anchor]" and value != "created_at":
        raise BadParam(name, "expires_after[anchor] must be created_at")
    if name == "expires_after[seconds]":
        low, high = SECONDS_RANGE
        if not value.isdigit() or not low <= int(value) <= high:
            raise BadParam(name, f"expires_after[seconds] must be an integer from {low} to {high}")


def _error(exc: RelayError) -> dict[str, Any]:
    if isinstance(exc, BadParam):
        error = {
            "type": "invalid_request_error",
            "code": exc.code,
            "message": exc.message,
            "param": exc.param,
        }
        return {"error": error}
    if exc.status in (400, 404):
        return {"error": {"type": "invalid_request_error", "code": exc.code, "message": exc.message}}
    return dict(orjson.loads(error_body(OPENAI, status=exc.status, code=exc.code, message=exc.message)))


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
