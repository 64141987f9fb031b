"""The Files API's bytes on disk (SPEC §14 under ``RELAY_BATCH_PAYLOAD_STORE=files``, §10.7's rules).

Layout: ``<RELAY_BATCH_PAYLOAD_DIR>/files/<file id>``, with the modes of every payload file (0700/0600,
or 0750/0640 under ``RELAY_BATCH_PAYLOAD_GROUP_READABLE``). A file being written is
``.<file id>.part`` beside it, written chunk by chunk (nothing is held in memory beyond one chunk),
flushed to disk and renamed when whole, so a reader sees the whole file or none. Paths are built only
from a validated file id (``file-`` + 26 base-32 digits): nothing a client sends can name another path.

What it deliberately does not know. Owners, purposes, expiry and the ``files`` rows (the service's),
and asynchrony: every call blocks and belongs in a worker thread.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from relay.payloads.directory import PRIVATE, Modes, fsync_dir, make_dir

FILE_ID = re.compile(r"^file-[0-9a-z]{26}$")
READ_CHUNK = 1 << 20
SUBDIR = "files"


class FileBytesDir:
    """The ``files/`` directory under one payload root."""

    def __init__(self, root: str | Path, modes: Modes = PRIVATE) -> None:
        self.directory = Path(root).resolve() / SUBDIR
        self.modes = modes

    def path(self, file_id: str) -> Path:
        if not FILE_ID.fullmatch(file_id):
            raise ValueError(f"not a file id: {file_id!r}")
        return self.directory / file_id

    def _part(self, file_id: str) -> Path:
        return self.path(file_id).with_name(f".{file_id}.part")

    def create(self, file_id: str) -> int:
        """A new, empty partial file for ``file_id``; its descriptor (the caller appends, then
        :meth:`commit` or :meth:`discard`)."""
        make_dir(self.directory, self.modes)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = os.open(self._part(file_id), flags, self.modes.file)
        os.fchmod(fd, self.modes.file)  # open's mode is filtered by the umask
        return fd

    @staticmethod
    def append(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def commit(self, file_id: str, fd: int) -> None:
        """Flush the partial file to disk, close it and give it its name (atomic for readers)."""
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self._part(file_id), self.path(file_id))
        fsync_dir(self.directory)

    def discard(self, file_id: str, fd: int | None) -> None:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            self._part(file_id).unlink()

    def remove(self, file_id: str) -> bool:
        """Remove the file (and any partial one); whether there was a whole file."""
        with contextlib.suppress(FileNotFoundError):
            self._part(file_id).unlink()
        try:
            self.path(file_id).unlink()
        except FileNotFoundError:
            return False
        return True

    def exists(self, file_id: str) -> bool:
        return self.path(file_id).exists()

    def open_for_reading(self, file_id: str) -> int:
        """The whole file's descriptor; ``FileNotFoundError`` when this replica does not have it."""
        return os.open(self.path(file_id), os.O_RDONLY | os.O_CLOEXEC)

    @staticmethod
    def read_chunk(fd: int, size: int = READ_CHUNK) -> bytes:
        return os.read(fd, size)
