"""Batch submission validation (SPEC §10.1) and payload files (§10.7): pure and filesystem-only parts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay.batches.payloads import PayloadStore
from relay.domain.batches import BatchRejected, validate_submission

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
    store = PayloadStore(tmp_path / "payloads")
    store.write_requests(BATCH_ID, [b'{"a":1}', b'{"b":2}'])
    assert store.read_request(BATCH_ID, 1) == b'{"b":2}'
    assert store.read_response(BATCH_ID, 0) is None
    store.write_response(BATCH_ID, 0, b'{"ok":true}')
    assert store.read_response(BATCH_ID, 0) == b'{"ok":true}'
    assert not [p for p in (tmp_path / "payloads" / BATCH_ID).iterdir() if p.name.endswith(".tmp")]
    for bad in ("../etc", "b_../../x", "B_" + "0" * 26, BATCH_ID + "/.."):
        with pytest.raises(ValueError):
            store.read_request(bad, 0)
        with pytest.raises(ValueError):
            store.response_path(bad, 0)
    with pytest.raises(FileNotFoundError):
        PayloadStore(tmp_path / "elsewhere").read_request(BATCH_ID, 0)


def test_request_bodies_are_one_file_per_batch_with_offsets(tmp_path: Path) -> None:
    """50 000 files would cost seconds to create: the requests go into one JSONL file plus an offsets
    file (renamed last, so its presence means the requests are complete). Any body comes back exactly;
    an idx past the end, or a truncated requests file, reads as missing (``load input: ``)."""
    store = PayloadStore(tmp_path)
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


def test_a_failed_write_leaves_no_batch_directory(tmp_path: Path) -> None:
    store = PayloadStore(tmp_path)

    def bodies() -> Iterator[bytes]:
        yield b"{}"
        raise RuntimeError("the submission broke off")

    with pytest.raises(RuntimeError):
        store.write_requests(BATCH_ID, bodies())
    assert list(tmp_path.iterdir()) == []
