"""Batch payload files (SPEC §10.7): the items' request bodies and each item's response body.

Layout under ``<RELAY_BATCH_PAYLOAD_DIR>/<batch id>/``:

* ``requests.jsonl`` — every item's request body, in idx order, one per line (compact JSON has no raw
  newline), and ``requests.offsets`` — where each one starts: ``n + 1`` little-endian unsigned 64-bit
  byte offsets, item ``idx`` being ``[offsets[idx], offsets[idx + 1] - 1)``. Two files per batch rather
  than one per item: creating 50 000 files costs seconds of filesystem time, which a submission cannot
  afford (SPEC §13: 50 000 items answered in < 10 s).
* ``responses-<writer>.data`` — completed items' response bodies, back to back, appended by one
  process (``<writer>`` is 16 random hex digits per :class:`PayloadDir`, so every file has a single
  writer, also across replicas sharing the directory). Where an item's body is (file, offset, length: a
  :class:`ResponseRef`) is recorded in the item's database row by the transaction that completes it.
  Appending is one ``write`` on an open file; a file per item cost 50–500 µs of filesystem time each
  (create + rename), a third of a batch item's CPU at 0 ms upstream latency.
* ``<idx>.response.json`` — one file per item, written by earlier versions; still read for items whose
  row records no :class:`ResponseRef`.

Atomic for readers. The request files are written under a temporary name, then renamed (the offsets
file last, so its presence means the requests file is complete). A response is only read through the
reference its item's row holds, and the batch finalizer flushes the appended bytes to disk
(:meth:`PayloadDir.responses_to_sync`, then :func:`sync_descriptors`) before that row commits, so
a reader sees a whole body or none; bytes a crash left unreferenced are never read. Paths are built
only from a batch id (validated: ``b_``, ``batch_`` or ``msgbatch_`` + base32), an integer index
and a file name matched against ``responses-<16 hex>.data``, so nothing a client sends can escape
the directory. A batch's files are removed only when the batch is gone: a create that did not commit
(:meth:`PayloadDir.discard_requests`) or a deleted batch (SPEC §17, §15: :meth:`PayloadDir.remove_batch`,
after its rows); only that batch's own directory, never another's.

Modes: directories 0700 and files 0600 by default, as private as the database and ``master.key``;
``group_readable`` (``RELAY_BATCH_PAYLOAD_GROUP_READABLE``) makes what is created from then on 0750 and
0640, for a sidecar or backup job running in Relay's group. Nothing is ever world-readable, and modes
hold whatever the umask (they are set explicitly); files created before a change keep their mode.

The directory must be shared by every replica that runs items; when it is not, ``read_request``
raises ``FileNotFoundError`` and the runner fails the item with ``load input: …`` (§10.7).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from relay.domain.batches import BATCH_ID_RE, ResponseRef

_BATCH_ID = BATCH_ID_RE  # every API's batch ids (relay.domain.batches)
_RESPONSES_FILE = re.compile(r"^responses-[0-9a-f]{16}\.data$")
REQUESTS_FILE = "requests.jsonl"
OFFSETS_FILE = "requests.offsets"
_SPAN = struct.Struct("<QQ")  # one item's start and the next item's start
_WRITE_BUFFER = 1 << 20
OPEN_RESPONSE_FILES = 32  # appended-to files kept open (one per batch being run here)
RUN_BYTES = 1 << 20  # one read's largest span of request bodies: a claim of small ones is well under it


class PayloadDir:
    """The payload directory of one process. :meth:`append_response`, :meth:`responses_to_sync` and
    :meth:`close` belong to the event loop's thread (the append is a plain ``write``; the flush, in
    :func:`sync_descriptors`, is given to a worker thread by the caller); the rest is safe from any
    thread."""

    def __init__(self, root: str | Path, *, group_readable: bool = False) -> None:
        self.root = Path(root).resolve()
        self.modes = GROUP_READABLE if group_readable else PRIVATE
        self._responses_file = f"responses-{secrets.token_hex(8)}.data"
        self._open: dict[str, _Appender] = {}  # batch id → its responses file, least recently used first
        self._retired: list[int] = []  # evicted descriptors with unsynced bytes: the next sync closes them

    def _dir(self, batch_id: str) -> Path:
        if not _BATCH_ID.fullmatch(batch_id):
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
        make_dir(directory, self.modes)
        offsets = array("Q", [0])
        position = 0
        try:
            with _atomic(directory / REQUESTS_FILE, self.modes) as handle:
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
        with _atomic(directory / OFFSETS_FILE, self.modes) as handle:
            handle.write(offsets.tobytes())
        fsync_dir(directory)
        if created:
            fsync_dir(directory.parent)
        return len(offsets) - 1

    def discard_requests(self, batch_id: str) -> None:
        """Remove the batch's directory, written by :meth:`write_requests` for a create whose batch did
        not commit (so no item of it ever ran and nothing else is in it)."""
        self.remove_batch(batch_id)

    def remove_batch(self, batch_id: str) -> None:
        """Remove the batch's directory and everything in it (a no-op when there is none). Call
        :meth:`forget` first, in the event loop's thread."""
        shutil.rmtree(self._dir(batch_id), ignore_errors=True)

    def forget(self, batch_id: str) -> None:
        """Stop appending to the batch's responses file (it is being removed): bytes appended earlier
        still get the next sync, on a descriptor that no longer names a file."""
        appender = self._open.pop(batch_id, None)
        if appender is not None:
            self._retire(appender)

    def append_response(self, batch_id: str, body: bytes) -> ResponseRef:
        """Append a completed item's response body to this process's file in the batch's directory.
        Durable once the descriptors :meth:`responses_to_sync` returns next have been synced."""
        appender = self._open.pop(batch_id, None)
        if appender is None:
            appender, created = _Appender.open(self._dir(batch_id), self._responses_file, self.modes)
            if created:  # its directory entry must reach the disk too: the next sync flushes it
                self._retired.append(os.open(appender.directory, os.O_RDONLY | os.O_DIRECTORY))
        try:
            offset = appender.append(body)
        except BaseException:
            self._retire(appender)  # where the file ends is unknown now: the next append reopens it
            raise
        self._open[batch_id] = appender  # most recently used last
        while len(self._open) > OPEN_RESPONSE_FILES:
            self._retire(self._open.pop(next(iter(self._open))))
        return ResponseRef(self._responses_file, offset, len(body))

    def _retire(self, appender: _Appender) -> None:
        """Stop appending to a file; bytes appended earlier still get their flush (the next sync's)."""
        if appender.dirty:
            self._retired.append(appender.fd)  # closed by that sync
        else:
            appender.close()

    def responses_to_sync(self) -> list[int]:
        """Descriptors whose appended bytes are not flushed yet, for :func:`sync_descriptors` (owned by
        the caller, who must pass them there: they are duplicates or retired descriptors)."""
        fds = [os.dup(appender.fd) for appender in self._open.values() if appender.dirty]
        for appender in self._open.values():
            appender.dirty = False
        fds.extend(self._retired)
        self._retired = []
        return fds

    def close(self) -> None:
        """Flush and close every open file (at shutdown, once nothing is appended any more)."""
        for appender in self._open.values():
            self._retire(appender)
        self._open.clear()
        retired, self._retired = self._retired, []
        sync_descriptors(retired)

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

    def read_small_requests(self, batch_id: str, idxs: Sequence[int], max_bytes: int) -> dict[int, bytes]:
        """The request bodies of these items that are at most ``max_bytes`` long, opening each file
        once for the group (a claim's items); the others, and any this replica cannot read whole, are
        left out: :meth:`read_request` reads them (and says why it cannot)."""
        wanted = sorted({int(idx) for idx in idxs if int(idx) >= 0})
        if not wanted:
            return {}
        directory = self._dir(batch_id)
        first, last = wanted[0], wanted[-1]
        try:
            fd = os.open(directory / OFFSETS_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        try:
            table = os.pread(fd, (last - first + 2) * 8, first * 8)
        finally:
            os.close(fd)
        starts = struct.unpack(f"<{len(table) // 8}Q", table[: len(table) // 8 * 8])
        spans = {
            idx: (starts[idx - first], starts[idx - first + 1])
            for idx in wanted
            if idx - first + 1 < len(starts)
            and 0 <= starts[idx - first + 1] - 1 - starts[idx - first] <= max_bytes
        }
        if not spans:
            return {}
        found: dict[int, bytes] = {}
        try:
            fd = os.open(directory / REQUESTS_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return {}
        try:
            for run_start, run_end, run in _runs(spans):
                chunk = os.pread(fd, run_end - 1 - run_start, run_start)
                for idx in run:
                    start, end = spans[idx][0] - run_start, spans[idx][1] - 1 - run_start
                    if end <= len(chunk):  # else cut short: left to read_request
                        found[idx] = chunk[start:end]
        finally:
            os.close(fd)
        return found

    def read_responses(
        self, batch_id: str, refs: Mapping[int, ResponseRef | None]
    ) -> dict[int, bytes | None]:
        """Completed items' response bodies by idx; ``None`` where this replica does not have it (the
        directory is not shared, SPEC §10.7). A ``None`` reference reads the per-item file of earlier
        versions."""
        directory = self._dir(batch_id)
        bodies: dict[int, bytes | None] = {}
        fds: dict[str, int | None] = {}
        try:
            for idx, ref in refs.items():
                if ref is None:
                    bodies[idx] = _read_file(self.response_path(batch_id, idx))
                    continue
                if ref.file not in fds:
                    fds[ref.file] = _open_for_reading(directory, ref.file)
                fd = fds[ref.file]
                body = os.pread(fd, ref.length, ref.offset) if fd is not None else b""
                bodies[idx] = body if len(body) == ref.length else None
        finally:
            for fd in fds.values():
                if fd is not None:
                    os.close(fd)
        return bodies


def _runs(spans: Mapping[int, tuple[int, int]]) -> list[tuple[int, int, list[int]]]:
    """The items cut into runs ``(start, end, idxs)`` whose bodies lie back to back in the requests file
    and span at most ``RUN_BYTES`` (a body longer than that is a run alone): each run is one ``pread``.
    A claim's items are mostly consecutive, and a ``pread`` per body made the reading thread give up
    and take back the GIL once per item, each time waking the event loop's thread."""
    runs: list[tuple[int, int, list[int]]] = []
    for idx in sorted(spans):
        start, end = spans[idx]
        if runs:
            run_start, _, idxs = runs[-1]
            if idx == idxs[-1] + 1 and end - run_start <= RUN_BYTES:
                idxs.append(idx)
                runs[-1] = (run_start, end, idxs)
                continue
        runs.append((start, end, [idx]))
    return runs


def sync_descriptors(fds: list[int]) -> None:
    """Flush each descriptor's file to disk and close it (a worker thread's job: it blocks). Every
    descriptor is closed even if a flush fails; the first failure is raised after."""
    failure: OSError | None = None
    for fd in fds:
        try:
            os.fdatasync(fd)
        except OSError as exc:
            failure = failure or exc
        finally:
            os.close(fd)
    if failure is not None:
        raise failure


class _Appender:
    """One open responses file: its descriptor and where it ends (this process is its only writer)."""

    __slots__ = ("directory", "dirty", "end", "fd")

    def __init__(self, directory: Path, fd: int, end: int) -> None:
        self.directory = directory
        self.fd = fd
        self.end = end
        self.dirty = False

    @classmethod
    def open(cls, directory: Path, name: str, modes: Modes) -> tuple[_Appender, bool]:
        """The file opened for appending, and whether this created it. The batch's directory must exist
        already (its requests were written there at submit): a batch removed meanwhile (a §15 delete
        while a late item still ran) is not recreated — the append fails with ``FileNotFoundError``."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        try:
            fd, created = os.open(directory / name, flags | os.O_CREAT | os.O_EXCL, modes.file), True
            os.fchmod(fd, modes.file)  # open's mode is filtered by the umask
        except FileExistsError:
            fd, created = os.open(directory / name, flags), False
        return cls(directory, fd, os.lseek(fd, 0, os.SEEK_END)), created

    def append(self, data: bytes) -> int:
        offset = self.end
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
            self.end += written
        self.dirty = True
        return offset

    def close(self) -> None:
        os.close(self.fd)


def _open_for_reading(directory: Path, name: str) -> int | None:
    if not _RESPONSES_FILE.fullmatch(name):
        raise ValueError(f"not a responses file: {name!r}")
    try:
        return os.open(directory / name, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None


def _read_file(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class Modes:
    """The permission bits of what this module creates: directories and files."""

    dir: int
    file: int


DIR_MODE = 0o700
FILE_MODE = 0o600
#: The default: prompts and completions are as private as the database and ``master.key`` (SPEC §10.7).
PRIVATE = Modes(DIR_MODE, FILE_MODE)
#: ``RELAY_BATCH_PAYLOAD_GROUP_READABLE=true``: Relay's group may read (a sidecar, a backup job), never write.
GROUP_READABLE = Modes(0o750, 0o640)


def make_dir(directory: Path, modes: Modes = PRIVATE) -> None:
    """The directory and any missing parent (the payload root included), mode ``modes.dir``."""
    missing = [p for p in (directory, *directory.parents) if not p.exists()]
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=modes.dir)
            os.chmod(path, modes.dir)  # mkdir's mode is filtered by the umask; the mode must hold as said


@contextlib.contextmanager
def _atomic(path: Path, modes: Modes = PRIVATE) -> Iterator[BinaryIO]:
    """A file written under a temporary name (mode ``modes.file``), flushed to disk, then renamed to
    ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, modes.file)
        os.fchmod(fd, modes.file)  # open's mode is filtered by the umask (and kept if tmp existed)
        with open(fd, "wb", buffering=_WRITE_BUFFER) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
