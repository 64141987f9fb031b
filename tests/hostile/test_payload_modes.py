"""Batch prompts and completions are private to Relay's user (SPEC §10.7: directories 0700, files 0600)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from relay.batches.payloads import PayloadDir
from relay.domain.ids import mint_id


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_payload_directories_are_0700_and_files_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the usual umask, which left them 0755/0644
    try:
        root = tmp_path / "deep" / "payloads"
        store = PayloadDir(root)
        batch_id = mint_id("b")
        store.write_requests(batch_id, [b'{"model": "m"}', b'{"model": "n"}'])
        store.append_response(batch_id, b'{"ok": true}')
        store.close()
    finally:
        os.umask(old)
    assert mode(root) == 0o700
    assert mode(root.parent) == 0o700
    directory = root / batch_id
    assert mode(directory) == 0o700
    files = [p for p in directory.iterdir() if p.is_file()]
    assert len(files) >= 3  # requests, offsets, responses
    assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
