"""Expiry and size (SPEC §14 Files): an expired file answers 404 everywhere and its bytes are removed
(on access, and by the periodic sweep on every replica for files nobody asks for); a 50 MB upload and
download go through without the relay holding the file in memory, byte-identical."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.integration.files.helpers import NOT_FOUND, FilesRelay, jsonl

LARGE = 50 * 1024 * 1024


def high_water_kib(fr: FilesRelay) -> int:
    """The relay process's peak resident set so far (VmHWM), in KiB."""
    assert fr.gw.relay.proc is not None
    for line in Path(f"/proc/{fr.gw.relay.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_an_expired_file_is_not_found_and_its_bytes_are_removed(files_relay: FilesRelay) -> None:
    fr = files_relay
    key = fr.new_key()
    expiring = {"purpose": "batch", "expires_after[anchor]": "created_at", "expires_after[seconds]": "3600"}
    file_id = fr.upload(key, jsonl(4), expiring).json()["id"]
    assert fr.bytes_stored(file_id)
    fr.set_expires_at(file_id, datetime.now(UTC) - timedelta(seconds=1))
    for path in (
        f"/openai/v1/files/{file_id}",
        f"/openai/v1/files/{file_id}/content",
        f"/v1/files/{file_id}",
    ):
        response = fr.http().get(path, headers=fr.gw.auth(key))
        assert response.status_code == 404 and response.json() == NOT_FOUND, response.text
    response = fr.http().delete(f"/openai/v1/files/{file_id}", headers=fr.gw.auth(key))
    assert response.status_code == 404
    assert fr.http().get("/openai/v1/files", headers=fr.gw.auth(key)).json()["data"] == []
    assert not fr.bytes_stored(file_id) and fr.rows_of(file_id=file_id) == 0


def test_the_sweep_removes_expired_files_nobody_asks_for(files_relay: FilesRelay) -> None:
    fr = files_relay
    key = fr.new_key()
    keep = fr.upload(key, jsonl(1)).json()["id"]
    gone = fr.upload(key, jsonl(2)).json()["id"]
    fr.set_expires_at(gone, datetime.now(UTC) - timedelta(seconds=1))
    deadline = time.monotonic() + 20  # RELAY_FILES_SWEEP_S=1 on these relays
    while fr.rows_of(file_id=gone) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fr.rows_of(file_id=gone) == 0 and not fr.bytes_stored(gone)
    assert fr.bytes_stored(keep) and fr.rows_of(file_id=keep) == 1  # an unexpired file stays


def test_a_large_upload_streams_through_without_being_held_in_memory(
    files_relay: FilesRelay, tmp_path: Path
) -> None:
    fr = files_relay
    path = tmp_path / "large.jsonl"
    line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        block = line * (1024 * 1024 // len(line) + 1)
        written = 0
        while written < LARGE:
            part = block[: LARGE - written]
            handle.write(part)
            digest.update(part)
            written += len(part)
    client = fr.sdk()
    before = high_water_kib(fr)
    with path.open("rb") as handle:
        created = client.files.create(file=handle, purpose="batch")
    assert created.bytes == LARGE
    downloaded = hashlib.sha256()
    size = 0
    with fr.http().stream("GET", f"/openai/v1/files/{created.id}/content", headers=fr.gw.auth(None)) as r:
        assert r.status_code == 200 and r.headers["content-length"] == str(LARGE)
        for chunk in r.iter_bytes():
            downloaded.update(chunk)
            size += len(chunk)
    grown_kib = high_water_kib(fr) - before
    assert size == LARGE and downloaded.hexdigest() == digest.hexdigest()
    assert grown_kib * 1024 < LARGE // 2, f"the relay's peak RSS grew by {grown_kib} KiB"
    assert client.files.delete(created.id).deleted is True
    assert not fr.bytes_stored(created.id)
