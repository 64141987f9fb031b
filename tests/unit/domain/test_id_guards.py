"""Id patterns used as validators and path guards match the whole string: Python's ``$`` also
matches before a final ``\\n``, so ``re.match(r"^…$")`` would let ``"a\\n"`` through (SPEC §15
``custom_id``; the payload directory's batch and file ids, SPEC §10.7/§14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.batch_apis.anthropic_create import validate_create
from relay.domain.batches import BatchRejected, is_batch_id
from relay.domain.ids import is_valid_name
from relay.domain.ratelimits import window_seconds
from relay.payloads.directory import PayloadDir
from relay.payloads.file_bytes import FileBytesDir

BATCH_ID = "msgbatch_" + "0" * 26
FILE_ID = "file-" + "0" * 26
PARAMS = {"model": "m", "max_tokens": 1, "messages": []}


def test_a_custom_id_with_a_trailing_newline_is_refused() -> None:
    assert validate_create({"requests": [{"custom_id": "a", "params": PARAMS}]}, 10)[1] == ["a"]
    with pytest.raises(BatchRejected, match=r"requests\[0\]\.custom_id: must be 1 to 64"):
        validate_create({"requests": [{"custom_id": "a\n", "params": PARAMS}]}, 10)


def test_batch_and_file_ids_with_a_trailing_newline_are_not_ids(tmp_path: Path) -> None:
    assert is_batch_id(BATCH_ID)
    assert not is_batch_id(BATCH_ID + "\n")
    payloads = PayloadDir(tmp_path)
    assert payloads.response_path(BATCH_ID, 0).parent.name == BATCH_ID
    with pytest.raises(ValueError, match="not a batch id"):
        payloads.response_path(BATCH_ID + "\n", 0)
    files = FileBytesDir(tmp_path)
    assert files.path(FILE_ID).name == FILE_ID
    with pytest.raises(ValueError, match="not a file id"):
        files.path(FILE_ID + "\n")


def test_names_and_windows_with_a_trailing_newline_are_refused() -> None:
    assert is_valid_name("team-a")
    assert not is_valid_name("team-a\n")
    assert window_seconds("1m") == 60
    with pytest.raises(ValueError):
        window_seconds("1m\n")
