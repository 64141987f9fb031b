"""Batch payload files (SPEC §10.7): each item's request and response body as a file.

Layout: ``<RELAY_BATCH_PAYLOAD_DIR>/<batch id>/<idx>.request.json`` and ``…/<idx>.response.json``.
Writes are atomic (a temporary file in the same directory, then ``rename``), so a reader sees a whole
file or none. Paths are built only from a batch id (validated: ``b_`` + base32) and an integer index,
so nothing a client sends can escape the directory. Files are never removed here.

The directory must be shared by every replica that runs items; when it is not, ``load`` raises
``FileNotFoundError`` and the runner fails the item with ``load input: …`` (§10.7).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

_BATCH_ID = re.compile(r"^b_[0-9a-z]{26}$")


class PayloadStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def _dir(self, batch_id: str) -> Path:
        if not _BATCH_ID.match(batch_id):
            raise ValueError(f"not a batch id: {batch_id!r}")
        return self.root / batch_id

    def request_path(self, batch_id: str, idx: int) -> Path:
        return self._dir(batch_id) / f"{int(idx)}.request.json"

    def response_path(self, batch_id: str, idx: int) -> Path:
        return self._dir(batch_id) / f"{int(idx)}.response.json"

    def write_requests(self, batch_id: str, bodies: Sequence[bytes]) -> None:
        """Every item's request body, each written atomically, then flushed to disk with one ``os.sync``
        (one call for the whole batch instead of an fsync per file), before the batch row commits."""
        directory = self._dir(batch_id)
        directory.mkdir(parents=True, exist_ok=True)
        for idx, body in enumerate(bodies):
            _atomic_write(directory / f"{idx}.request.json", body)
        os.sync()

    def write_response(self, batch_id: str, idx: int, body: bytes) -> None:
        path = self.response_path(batch_id, idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, body)

    def read_request(self, batch_id: str, idx: int) -> bytes:
        return self.request_path(batch_id, idx).read_bytes()

    def read_response(self, batch_id: str, idx: int) -> bytes | None:
        try:
            return self.response_path(batch_id, idx).read_bytes()
        except FileNotFoundError:
            return None


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
