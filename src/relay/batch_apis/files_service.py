"""The Files API's service (SPEC §14 Files): uploads, listing, reading, deleting and expiring files, and
the calls the OpenAI Batches façade needs (read an input file's bytes, a chunk at a time; write an
output or error file line by line).

What it does. Mints file ids (``file-`` + 26 time-ordered base-32 digits) and timestamps, keeps the
``files`` rows (``relay.store.files``) and puts the bytes in the payload store selected by
``RELAY_BATCH_PAYLOAD_STORE`` (``relay.payloads.base``; the row records which, so switching
the setting keeps old files readable). An upload is an :class:`Upload`: its row is inserted
``uploading`` first, the bytes are streamed into the store, and :meth:`Upload.finish` makes it visible
— or :meth:`Upload.abort` removes row and bytes, so a refused upload leaves nothing. The sweep
(:meth:`FileService.sweep`, every ``RELAY_FILES_SWEEP_S`` on every replica) removes expired files
and uploads whose writer died; an expired file met by a request is removed there and then.

What it deliberately does not know. HTTP and multipart (``relay.batch_apis.files``), credentials:
every call takes the owner string of §10.8 and treats another owner's file as unknown.

Invariants. Only whole (``processed``), unexpired files of the caller are ever seen; the bytes of a
file are never held whole in memory (written and read a chunk at a time).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from relay.background import Loop
from relay.domain.ids import mint_id
from relay.errors import NotFound, PayloadTooLarge
from relay.payloads.base import FileSink, PayloadStores
from relay.store import files as rows
from relay.store.engine import Engine
from relay.store.files import FileRow

log = logging.getLogger("relay.files")
PURPOSES: Final = ("batch", "batch_output")
ABANDONED_AFTER: Final = timedelta(hours=6)  # an upload still "uploading" this long lost its writer
SWEEP_GROUP: Final = 500


def new_file_id() -> str:
    return "file-" + mint_id("f").removeprefix("f_")


def not_found() -> NotFound:
    return NotFound("file not found")


@dataclass(frozen=True, slots=True)
class FilePage:
    files: list[FileRow]
    has_more: bool


def file_object(row: FileRow) -> dict[str, Any]:
    """The OpenAI File object (SPEC §14)."""
    return {
        "id": row.id,
        "object": "file",
        "bytes": row.bytes,
        "created_at": int(row.created_at.timestamp()),
        "filename": row.filename,
        "purpose": row.purpose,
        "expires_at": None if row.expires_at is None else int(row.expires_at.timestamp()),
        "status": "processed",
    }


class Upload:
    """One file being written. ``write`` the bytes in order (``PayloadTooLarge`` past the limit), then
    ``finish`` or ``abort``; an upload neither finished nor aborted is removed by the sweep."""

    def __init__(self, service: FileService, row: FileRow, sink: FileSink, max_bytes: int | None) -> None:
        self._service, self.row, self._sink, self._max = service, row, sink, max_bytes
        self.size = 0
        self._open = True

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        if self._max is not None and self.size > self._max:
            raise PayloadTooLarge(f"file is larger than {self._max} bytes (RELAY_BATCH_MAX_BYTES)")
        await self._sink.write(data)

    async def finish(
        self,
        *,
        purpose: str,
        filename: str,
        expires_after_s: int | None = None,
        expires_at: datetime | None = None,
    ) -> FileRow:
        if expires_after_s is not None:
            expires_at = self.row.created_at + timedelta(seconds=expires_after_s)
        await self._sink.commit()
        done = await rows.mark_processed(
            self._service.engine,
            self.row.id,
            purpose=purpose,
            filename=filename,
            size=self.size,
            expires_at=expires_at,
        )
        self._open = False
        if not done:  # swept meanwhile: nothing must stay behind
            await self._service.remove(self.row)
            raise not_found()
        return FileRow(
            id=self.row.id,
            owner=self.row.owner,
            purpose=purpose,
            filename=filename,
            bytes=self.size,
            status="processed",
            payload_store=self.row.payload_store,
            created_at=self.row.created_at,
            expires_at=expires_at,
        )

    async def abort(self) -> None:
        if not self._open:
            return
        self._open = False
        with contextlib.suppress(Exception):
            await self._sink.discard()
        await self._service.remove(self.row)


class OutputFile:
    """A ``batch_output`` file being written: ``write_line`` (each gets a ``\\n`` unless it ends with
    one), then ``finish`` (its File object) or ``abort`` (nothing stays)."""

    def __init__(self, upload: Upload) -> None:
        self._upload = upload

    async def write_line(self, line: bytes) -> None:
        await self._upload.write(line if line.endswith(b"\n") else line + b"\n")

    async def finish(
        self, *, filename: str, expires_at: datetime | None = None, expires_after_s: int | None = None
    ) -> dict[str, Any]:
        """``expires_at`` (an instant) or ``expires_after_s`` (seconds after its ``created_at``) sets
        when it expires; neither: never."""
        row = await self._upload.finish(
            purpose="batch_output", filename=filename, expires_at=expires_at, expires_after_s=expires_after_s
        )
        return file_object(row)

    async def abort(self) -> None:
        await self._upload.abort()


class FileService:
    def __init__(
        self, engine: Engine, stores: PayloadStores, *, max_bytes: int, sweep_every_s: float = 60.0
    ) -> None:
        self.engine = engine
        self._stores = stores
        self._max_bytes = max_bytes
        self._sweeper = Loop("file-sweep", self._sweep_and_log, every_s=sweep_every_s)

    # -- writing --------------------------------------------------------------------------------

    async def begin_upload(self, owner: str, *, limit: bool = True) -> Upload:
        """A new upload of ``owner`` into the current store (its row exists from now, unseen)."""
        store = self._stores.current
        row = FileRow(
            id=new_file_id(),
            owner=owner,
            purpose="batch",
            filename="",
            bytes=0,
            status="uploading",
            payload_store=store.name,
            created_at=_now().replace(microsecond=0),
            expires_at=None,
        )
        await rows.insert_uploading(self.engine, row)
        try:
            sink = await store.open_file(row.id)
        except BaseException:
            await rows.delete_file(self.engine, row.id)
            raise
        return Upload(self, row, sink, self._max_bytes if limit else None)

    async def begin_output(self, owner: str) -> OutputFile:
        """A ``batch_output`` file of ``owner`` to write line by line (the OpenAI Batches façade's output
        and error files, written side by side as the results are read). Not bounded by
        ``RELAY_BATCH_MAX_BYTES`` (Relay writes it, nobody uploads it)."""
        return OutputFile(await self.begin_upload(owner, limit=False))

    async def create_output(
        self,
        owner: str,
        lines: AsyncIterable[bytes] | Iterable[bytes],
        *,
        filename: str,
        expires_at: datetime | None = None,
        expires_after_s: int | None = None,
    ) -> dict[str, Any]:
        """A ``batch_output`` file of ``owner`` made of ``lines`` (:meth:`begin_output`); returns its
        File object."""
        output = await self.begin_output(owner)
        try:
            if isinstance(lines, AsyncIterable):
                async for line in lines:
                    await output.write_line(line)
            else:
                for line in lines:
                    await output.write_line(line)
            return await output.finish(
                filename=filename, expires_at=expires_at, expires_after_s=expires_after_s
            )
        except BaseException:
            await output.abort()
            raise

    # -- reading --------------------------------------------------------------------------------

    async def get(self, owner: str, file_id: str) -> FileRow:
        """The caller's file; ``NotFound`` ("file not found") for unknown, foreign or expired ones."""
        row = await rows.visible(self.engine, owner, file_id, _now())
        if row is None:
            await self._remove_if_expired(file_id)
            raise not_found()
        return row

    async def list(
        self, owner: str, *, purpose: str | None, after: str | None, order: Literal["asc", "desc"], limit: int
    ) -> FilePage:
        found = await rows.page(
            self.engine, owner, _now(), purpose=purpose, after=after, order=order, limit=limit + 1
        )
        return FilePage(found[:limit], len(found) > limit)

    async def content(self, owner: str, file_id: str) -> tuple[FileRow, AsyncIterator[bytes]]:
        """The caller's file and its bytes, a chunk at a time (``FileNotFoundError`` from the iterator
        when a ``files``-store file is not on this replica's disk)."""
        row = await self.get(owner, file_id)
        return row, self._stores.of(row.payload_store).read_file(row.id)

    async def lines(self, owner: str, file_id: str) -> AsyncIterator[bytes]:
        """The caller's file line by line (each without its ``\\n``; a last line without one too): the
        split the Batches create's streamed read (``relay.batch_apis.openai_create``) numbers its lines
        by. ``NotFound`` before the first line if it is not theirs."""
        _, chunks = await self.content(owner, file_id)
        return _split_lines(chunks)

    # -- removing -------------------------------------------------------------------------------

    async def delete(self, owner: str, file_id: str) -> dict[str, Any]:
        row = await self.get(owner, file_id)
        await self.remove(row)
        return {"id": row.id, "object": "file", "deleted": True}

    async def remove(self, row: FileRow) -> None:
        """Row and bytes (the row first: from then on nobody sees the file; a failure after it leaves
        only unreferenced bytes on disk)."""
        await rows.delete_file(self.engine, row.id)
        if row.payload_store != "database":  # the database store's chunks went with the row
            await self._stores.of(row.payload_store).remove_file(row.id)

    async def remove_any(self, file_id: str) -> bool:
        """Row and bytes of ``file_id`` whoever owns it, expired or not (the output files of a batch
        being deleted, SPEC §17); False when there is no such file (already removed or expired)."""
        row = await rows.find(self.engine, file_id)
        if row is None:
            return False
        await self.remove(row)
        return True

    async def _remove_if_expired(self, file_id: str) -> None:
        row = await rows.find(self.engine, file_id)
        if row is not None and row.expires_at is not None and row.expires_at <= _now():
            await self.remove(row)

    async def sweep(self) -> int:
        """Remove expired files and abandoned uploads; how many."""
        removed = 0
        while True:
            now = _now()
            group = await rows.to_sweep(self.engine, now, now - ABANDONED_AFTER, SWEEP_GROUP)
            for row in group:
                await self.remove(row)
            removed += len(group)
            if len(group) < SWEEP_GROUP:
                return removed

    async def _sweep_and_log(self) -> None:
        removed = await self.sweep()
        if removed:
            log.info("file sweep removed %d files", removed)

    async def start(self) -> None:
        await self._sweeper.start()

    async def stop(self) -> None:
        await self._sweeper.stop()


async def _split_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    rest = b""
    async for chunk in chunks:
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for line in parts:
            yield line
    if rest:
        yield rest


def _now() -> datetime:
    return datetime.now(UTC)
