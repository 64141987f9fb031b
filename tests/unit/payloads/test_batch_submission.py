"""Batch submission validation (SPEC §10.1) and payload files (§10.7): pure and filesystem-only parts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay.domain.batches import BatchRejected, ResponseRef, validate_submission
from relay.payloads import directory as payloads
from relay.payloads.directory import PayloadDir, sync_descriptors

BATCH_ID = "b_" + "0" * 26


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "must be a JSON object"),
        ("text", "must be a JSON object"),
        ({"requests": [{}]}, "shape is required"),
        ({"shape": "canonical", "requests": [{}]}, "cannot be batched"),
        ({"shape": "embeddings", "requests": [{}]}, "openai, anthropic, openai_responses"),
        ({"shape": "openai"}, "requests is required"),
        ({"shape": "openai", "requests": {"a": 1}}, "must be a list"),
        ({"shape": "openai", "requests": []}, "must not be empty"),
        ({"shape": "openai", "requests": [{}, {}, {}, {}]}, "at most 3 are allowed (RELAY_BATCH_MAX_ITEMS)"),
        ({"shape": "openai", "requests": [{}, {}, 7]}, "requests[2]: must be a JSON object"),
        ({"shape": "anthropic", "requests": [{"stream": False}, {"stream": True}]}, "requests[1]: stream"),
    ],
)
def test_rejections_name_the_problem(body: Any, message: str) -> None:
    with pytest.raises(BatchRejected) as info:
        validate_submission(body, max_items=3)
    assert message in str(info.value)


def test_items_are_not_otherwise_inspected() -> None:
    shape, requests = validate_submission(
        {"shape": "openai_responses", "requests": [{}, {"x": 1}]}, max_items=3
    )
    assert shape == "openai_responses" and requests == [{}, {"x": 1}]


def test_payload_files_round_trip_and_stay_inside_the_directory(tmp_path: Path) -> None:
    store = PayloadDir(tmp_path / "payloads")
    store.write_requests(BATCH_ID, [b'{"a":1}', b'{"b":2}'])
    assert store.read_request(BATCH_ID, 1) == b'{"b":2}'
    assert store.read_responses(BATCH_ID, {0: None}) == {0: None}
    ref = store.append_response(BATCH_ID, b'{"ok":true}')
    assert store.read_responses(BATCH_ID, {0: ref}) == {0: b'{"ok":true}'}
    assert not [p for p in (tmp_path / "payloads" / BATCH_ID).iterdir() if p.name.endswith(".tmp")]
    for bad in ("../etc", "b_../../x", "B_" + "0" * 26, BATCH_ID + "/.."):
        with pytest.raises(ValueError):
            store.read_request(bad, 0)
        with pytest.raises(ValueError):
            store.response_path(bad, 0)
    with pytest.raises(FileNotFoundError):
        PayloadDir(tmp_path / "elsewhere").read_request(BATCH_ID, 0)


def test_request_bodies_are_one_file_per_batch_with_offsets(tmp_path: Path) -> None:
    """50 000 files would cost seconds to create: the requests go into one JSONL file plus an offsets
    file (renamed last, so its presence means the requests are complete). Any body comes back exactly;
    an idx past the end, or a truncated requests file, reads as missing (``load input: ``)."""
    store = PayloadDir(tmp_path)
    bodies = [orjson.dumps({"i": i, "text": "x" * (i % 7)}) for i in range(1000)]
    assert store.write_requests(BATCH_ID, iter(bodies)) == 1000
    assert sorted(p.name for p in (tmp_path / BATCH_ID).iterdir()) == ["requests.jsonl", "requests.offsets"]
    assert [store.read_request(BATCH_ID, i) for i in range(1000)] == bodies
    for idx in (1000, -1):
        with pytest.raises(FileNotFoundError):
            store.read_request(BATCH_ID, idx)
    requests = tmp_path / BATCH_ID / "requests.jsonl"
    requests.write_bytes(requests.read_bytes()[:-5])
    with pytest.raises(FileNotFoundError):
        store.read_request(BATCH_ID, 999)
    assert store.read_request(BATCH_ID, 998) == bodies[998]


def test_a_claims_bodies_are_read_in_runs_each_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's items are read with one ``pread`` per run of consecutive idxs (at most ``RUN_BYTES``
    each), and each body comes back exactly: gaps, bodies over ``max_bytes``, a run cut by its size and
    a truncated requests file included."""
    store = PayloadDir(tmp_path)
    bodies = [orjson.dumps({"i": i, "text": "y" * (i * 37 % 300)}) for i in range(400)]
    store.write_requests(BATCH_ID, iter(bodies))
    reads: list[int] = []
    real_pread = os.pread

    def counting_pread(fd: int, size: int, offset: int) -> bytes:
        reads.append(size)
        return real_pread(fd, size, offset)

    monkeypatch.setattr(payloads.os, "pread", counting_pread)
    wanted = [*range(10, 74), *range(200, 203), 399, 5]
    found = store.read_small_requests(BATCH_ID, wanted, 10_000)
    assert found == {idx: bodies[idx] for idx in wanted}
    assert len(reads) == 1 + 4  # the offsets, then runs 5, 10–73, 200–202, 399

    reads.clear()
    limit = 200
    found = store.read_small_requests(BATCH_ID, range(400), limit)
    assert found == {idx: body for idx, body in enumerate(bodies) if len(body) <= limit}

    monkeypatch.setattr(payloads, "RUN_BYTES", 1000)
    reads.clear()
    found = store.read_small_requests(BATCH_ID, range(400), 10_000)
    assert found == dict(enumerate(bodies))
    assert 1 + sum(len(b) + 1 for b in bodies) // 1000 <= len(reads) - 1 < 400
    assert max(reads[1:]) <= 1000  # every body here is shorter than a run

    requests = tmp_path / BATCH_ID / "requests.jsonl"
    requests.write_bytes(requests.read_bytes()[:-5])
    monkeypatch.setattr(payloads, "RUN_BYTES", 1 << 20)
    found = store.read_small_requests(BATCH_ID, range(390, 400), 10_000)
    assert found == {idx: bodies[idx] for idx in range(390, 399)}  # the cut one is left to read_request


def test_a_failed_write_leaves_no_batch_directory(tmp_path: Path) -> None:
    store = PayloadDir(tmp_path)

    def bodies() -> Iterator[bytes]:
        yield b"{}"
        raise RuntimeError("the submission broke off")

    with pytest.raises(RuntimeError):
        store.write_requests(BATCH_ID, bodies())
    assert list(tmp_path.iterdir()) == []


def test_responses_are_appended_to_one_file_per_process_and_read_by_reference(tmp_path: Path) -> None:
    """A file per response cost 50–500 µs of filesystem time per item: responses are appended to one
    file per process and batch, and read back through the (file, offset, length) their row records."""
    store = PayloadDir(tmp_path)
    other = PayloadDir(tmp_path)  # another replica on the same (shared) directory
    store.write_requests(BATCH_ID, [b"{}"] * 3)
    bodies = [orjson.dumps({"reply": i, "text": "\n" * i}) for i in range(3)]
    refs = {0: store.append_response(BATCH_ID, bodies[0]), 2: store.append_response(BATCH_ID, bodies[2])}
    refs[1] = other.append_response(BATCH_ID, bodies[1])
    assert refs[0].file == refs[2].file != refs[1].file  # one writer per file
    assert (refs[0].offset, refs[2].offset) == (0, len(bodies[0]))
    assert store.read_responses(BATCH_ID, refs) == dict(enumerate(bodies))
    assert other.read_responses(BATCH_ID, refs) == dict(enumerate(bodies))  # any replica reads any file
    # What the directory holds: the request files and one responses file per writer, nothing per item.
    names = sorted(p.name for p in (tmp_path / BATCH_ID).iterdir())
    assert names == sorted(["requests.jsonl", "requests.offsets", refs[0].file, refs[1].file])
    # A replica that does not share the directory, or bytes that are not there, read as missing.
    assert PayloadDir(tmp_path / "elsewhere").read_responses(BATCH_ID, refs) == dict.fromkeys(refs)
    past_the_end = ResponseRef(refs[2].file, refs[2].offset, refs[2].length + 1)
    assert store.read_responses(BATCH_ID, {2: past_the_end}) == {2: None}
    for bad in ("../requests.jsonl", "requests.jsonl", "responses-../../x.data"):
        with pytest.raises(ValueError):
            store.read_responses(BATCH_ID, {0: ResponseRef(bad, 0, 1)})
    # Per-item files of earlier versions are still read when a row has no reference.
    (tmp_path / BATCH_ID / "7.response.json").write_bytes(b'{"old":true}')
    assert store.read_responses(BATCH_ID, {7: None}) == {7: b'{"old":true}'}
    store.close()
    other.close()


def test_a_sync_flushes_every_file_written_since_the_last_one(tmp_path: Path) -> None:
    """Before a group of items commits, their bodies (and a new file's directory entry) are flushed;
    files evicted from the open set while unflushed are flushed by the next sync, then closed."""
    store = PayloadDir(tmp_path)
    ids = [f"b_{i:026d}" for i in range(payloads.OPEN_RESPONSE_FILES + 2)]
    for batch_id in ids:
        (tmp_path / batch_id).mkdir()
        store.append_response(batch_id, b"{}")
    fds = store.responses_to_sync()
    # every open file (a duplicate), the two evicted ones, and each new file's directory
    assert len(fds) == payloads.OPEN_RESPONSE_FILES + 2 + len(ids)
    sync_descriptors(fds)
    assert store.responses_to_sync() == []  # nothing new since
    store.append_response(ids[-1], b"{}")
    fds = store.responses_to_sync()
    assert len(fds) == 1
    sync_descriptors(fds)
    with pytest.raises(OSError):
        os.fstat(fds[0])  # closed by the sync
    store.close()
