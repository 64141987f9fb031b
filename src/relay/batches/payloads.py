"""Batch payload files (SPEC §10.7): the items' request bodies and each item's response body.

Layout under ``<RELAY_BATCH_PAYLOAD_DIR>/<batch id>/``:

* ``requests.jsonl`` — every item's request body, in idx order, one per line (compact JSON has no raw
  newline), and ``requests.offsets`` — where each one starts: ``n + 1`` little-endian unsigned 64-bit
  byte offsets, item ``idx`` being ``[offsets[idx], offsets[idx + 1] - 1)``. Two files per batch rather
  than one per item: creating 50 000 files costs seconds of filesystem time, which a submission cannot
  afford (SPEC §13: 50 000 items answered in < 10 s).
* ``<idx>.response.json`` — a completed item's response body, one file per item.

Writes are atomic (a temporary file in the same directory, then ``rename``), so a reader sees a whole
file or none; the offsets file is renamed last, so its presence means the requests file is complete.
Paths are built only from a batch id (validated: ``b_`` + base32) and an integer index, so nothing a
client sends can escape the directory. Files are never removed here.

The directory must be shared by every replica that runs items; when it is not, ``read_request``
raises ``FileNotFoundError`` and the runner fails the item with ``load input: …`` (§10.7).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

_BATCH_ID = re.compile(r"^b_[0-9a-z]{26}$")
REQUESTS_FILE = "requests.jsonl"
OFFSETS_FILE = "requests.offsets"
_SPAN = struct.Struct("<QQ")  # one item's start and the next item's start
_WRITE_BUFFER = 1 << 20


class PayloadStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def _dir(self, batch_id: str) -> Path:
        if not _BATCH_ID.match(batch_id):
            raise ValueError(f"not a batch id: {batch_id!r}")
        return self.root / batch_id

    def response_path(self, batch_id: str, idx: int) -> Path:
        return self._dir(batch_id) / f"{int(idx)}.response.json"

    def write_requests(self, batch_id: str, bodies: Iterable[bytes]) -> int:
        """Every item's request body (consumed in idx order), with their offsets, each file written
        atomically and flushed to disk, directory entries included, before the batch row commits.
        Returns the number of bodies written."""
        directory = self._dir(batch_id)
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        offsets = array("Q", [0])
        position = 0
        try:
            with _atomic(directory / REQUESTS_FILE) as handle:
                for body in bodies:
                    handle.write(body)
                    handle.write(b"\n")
                    position += len(body) + 1
                    offsets.append(position)
        except BaseException:
            if created:
                with contextlib.suppress(OSError):
                    directory.rmdir()  # nothing of this batch stays behind
            raise
        if sys.byteorder != "little":
            offsets.byteswap()
        with _atomic(directory / OFFSETS_FILE) as handle:
            handle.write(offsets.tobytes())
        _fsync_dir(directory)
        if created:
            _fsync_dir(directory.parent)
        return len(offsets) - 1

    def write_response(self, batch_id: str, idx: int, body: bytes) -> None:
        path = self.response_path(batch_id, idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, body)

    def read_request(self, batch_id: str, idx: int) -> bytes:
        """One item's request body; ``FileNotFoundError`` when this replica does not have it."""
        directory = self._dir(batch_id)
        idx = int(idx)
        fd = os.open(directory / OFFSETS_FILE, os.O_RDONLY | os.O_CLOEXEC)
        try:
            span = os.pread(fd, _SPAN.size, idx * 8) if idx >= 0 else b""
        finally:
            os.close(fd)
        if len(span) != _SPAN.size:
            raise FileNotFoundError(f"batch {batch_id} has no request {idx}")
        start, end = _SPAN.unpack(span)
        fd = os.open(directory / REQUESTS_FILE, os.O_RDONLY | os.O_CLOEXEC)
        try:
            body = os.pread(fd, end - 1 - start, start)
        finally:
            os.close(fd)
        if len(body) != end - 1 - start:
            raise FileNotFoundError(f"the requests file of batch {batch_id} is truncated")
        return body

    def read_response(self, batch_id: str, idx: int) -> bytes | None:
        try:
            return self.response_path(batch_id, idx).read_bytes()
        except FileNotFoundError:
            return None


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[BinaryIO]:
    """A file written under a temporary name, flushed to disk, then renamed to ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb", buffering=_WRITE_BUFFER) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
