"""Batch submission validation (SPEC §10.1) and payload files (§10.7): pure and filesystem-only parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
            store.request_path(bad, 0)
    with pytest.raises(FileNotFoundError):
        PayloadStore(tmp_path / "elsewhere").read_request(BATCH_ID, 0)
