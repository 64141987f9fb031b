"""The Files API's multipart upload form (SPEC §14 Files), parsed as it arrives: ``python-multipart``'s
streaming parser queues events per received chunk, which :class:`StreamedForm` applies in order — the
``file`` part's bytes to the service's :class:`relay.batch_apis.files_service.Upload`, the small fields
to memory,
each field checked as soon as it ends (before any later file bytes are stored).

What it deliberately does not know. HTTP (how the body arrives, what an error answer looks like:
``relay.batch_apis.files``), where bytes are stored.

Invariants. At most one ``file`` part and one of each field; a non-file field is at most
:data:`FIELD_LIMIT` bytes; a refusal is a :class:`BadParam` naming the field; :meth:`StreamedForm.abort`
leaves nothing of an unfinished upload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

from relay.batch_apis.files_service import FileService, Upload
from relay.domain.openai_batches import BadParam
from relay.store.files import FileRow

FIELD_LIMIT = 1024  # the longest non-file field value
FILENAME_LIMIT = 255
SECONDS_RANGE = (3600, 2_592_000)


class StreamedForm:
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
