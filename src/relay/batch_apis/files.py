"""The Files API's HTTP face (SPEC §14 Files): a raw-ASGI app mounted at ``/openai/v1/files`` and its
alias ``/v1/files`` on the inference listener.

Routes: ``POST`` (multipart upload), ``GET`` (list), ``GET /{id}``, ``GET /{id}/content`` (streamed),
``DELETE /{id}``. Thin handlers: authenticate like every ``/v1`` route (an upload needs a usable
policy, like a batch submission; reading and deleting one's files needs a valid credential —
``authenticate_owner``), check the parameters, call
:class:`relay.batch_apis.files_service.FileService`, render.
Errors are OpenAI-shaped; a bad parameter is a 400 whose ``param`` names it; an unknown or foreign id
is a 404 ``file not found``, identical in both cases (SPEC §10.8).

The upload is parsed as it arrives (``relay.batch_apis.upload_form``, ``python-multipart``'s streaming
parser): the ``file`` part's bytes go to the store a received chunk at a time, never whole in memory.
Any refusal (bad field, over ``RELAY_BATCH_MAX_BYTES``, malformed body, client gone) aborts the upload
— no row, no bytes.

Invariants. The relay never reads more than ``RELAY_BATCH_MAX_BYTES`` + :data:`MULTIPART_OVERHEAD` of a
request body, whatever it declares (a chunked body is counted as it arrives, fields and boundaries
included), and stops reading at the closing boundary (an epilogue is not read past
:data:`EPILOGUE_LIMIT` bytes or :data:`EPILOGUE_WAIT_S`). A 401, 405 or 413 reads nothing more: it
is answered with ``Connection: close``. Another refusal (a bad field) reads the rest within that
bound, so the client sees the answer, not a reset; an answer sent with body bytes still unread always
carries ``Connection: close``. The route table, 404/405 and error answers are
``relay.batch_apis.router``' (this app's call carries its streamed body, so every answer, refusals
included, knows whether bytes are left unread).

What it deliberately does not know. Where bytes are stored, ids, clocks, expiry (the service's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

import orjson
from python_multipart.multipart import parse_options_header
from starlette.types import Receive, Scope, Send

from relay.adapters import OPENAI
from relay.batch_apis.files_service import PURPOSES, FileService, file_object
from relay.batch_apis.router import ApiCall, ApiRoute, RoutedApp
from relay.batch_apis.upload_form import StreamedForm
from relay.domain.openai_batches import BadParam
from relay.errors import PayloadTooLarge, RelayError
from relay.http.errors import openai_api_error
from relay.http.wire import ClientDisconnected, head, new_request_id, query_params
from relay.snapshot import Snapshot

if TYPE_CHECKING:
    from relay.store.files import FileRow  # the row's type only: the service reads and writes rows

log = logging.getLogger("relay.files")
PREFIXES = ("/openai/v1/files", "/v1/files")
LIST_LIMIT = (1, 10_000)
LIST_PARAMS = ("purpose", "limit", "after", "order")
MULTIPART_OVERHEAD = 64 * 1024  # what a body may exceed the file limit by (boundaries, fields)
EPILOGUE_LIMIT: Final = 1024  # what is still read after the closing boundary (a CRLF, an empty end)
EPILOGUE_WAIT_S: Final = 1.0  # and for how long at most
CLOSE: Final = (b"connection", b"close")
UNREAD_ON: Final = (401, 405, 413)  # refusals that read no more of the body


class _FileCall(ApiCall):
    """A Files request: its body is read as it arrives (:class:`_Body`), so every answer knows
    whether bytes are left unread."""

    body: _Body


class FilesApp(RoutedApp[_FileCall]):
    shape = OPENAI
    what = "files request"

    def __init__(
        self,
        service: FileService,
        snapshot: Callable[[], Snapshot],
        max_bytes: int,
        prefix: str,
        *,
        database_unavailable: Callable[[BaseException], bool],
    ) -> None:
        self._service = service
        self._max_bytes = max_bytes
        super().__init__(
            prefix,
            snapshot,
            [
                ApiRoute("GET", "", self._list),
                ApiRoute("POST", "", self._upload),
                ApiRoute("GET", "{id}", self._get),
                ApiRoute("DELETE", "{id}", self._delete),
                ApiRoute("GET", "{id}/content", self._content),
            ],
            database_unavailable,
        )

    def new_call(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str]) -> _FileCall:
        call = _FileCall(scope, receive, send, new_request_id(), headers, self._snapshot)
        empty = "transfer-encoding" not in headers and headers.get("content-length", "0") == "0"
        call.body = _Body(receive, self._max_bytes + MULTIPART_OVERHEAD, self._too_large(), empty=empty)
        return call

    def error_body(self, exc: RelayError) -> bytes:
        return openai_api_error(exc)

    async def send_error(
        self, call: _FileCall, status: int, body: bytes, extra: Sequence[tuple[bytes, bytes]]
    ) -> None:
        if status not in UNREAD_ON:
            await call.body.drain()
        await call.json(status, body, [*extra, *_unread(call.body, extra)])

    async def _get(self, call: _FileCall) -> None:
        answer = file_object(await self._service.get(call.owner(), call.id))
        await _json(call, answer)

    async def _delete(self, call: _FileCall) -> None:
        await _json(call, await self._service.delete(call.owner(), call.id))

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"file is larger than {self._max_bytes} bytes (RELAY_BATCH_MAX_BYTES)")

    async def _upload(self, call: _FileCall) -> None:
        row = await self._receive(call.principal().owner, call.headers, call.body)
        await _json(call, file_object(row))

    async def _receive(self, owner: str, headers: dict[str, str], body: _Body) -> FileRow:
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

    async def _list(self, call: _FileCall) -> None:
        await _json(call, await self._page(call.owner(), call.scope))

    async def _page(self, owner: str, scope: Scope) -> dict[str, Any]:
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

    async def _content(self, call: _FileCall) -> None:
        file_id, send = call.id, call.send
        row, chunks = await self._service.content(call.owner(), file_id)
        try:
            first = await anext(chunks, b"")
        except FileNotFoundError:
            raise RelayError(
                "the file's bytes are not on this replica (RELAY_BATCH_PAYLOAD_DIR is not shared)",
                code="file_unavailable",
                status=503,
            ) from None
        length = (b"content-length", str(row.bytes).encode())
        await send(head(200, "application/octet-stream", call.request_id, [length]))
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


async def _json(call: _FileCall, payload: dict[str, Any]) -> None:
    """A 200 answer (``Connection: close`` when body bytes are left unread)."""
    await call.json(200, orjson.dumps(payload), _unread(call.body))
