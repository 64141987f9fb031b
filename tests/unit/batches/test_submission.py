"""A spooled submission read item by item (``relay.batches.submission``): the same items and refusals as
the whole-body parse (``relay.domain.batches.validate_submission``), whatever the read window cuts —
an item, a string, a number or a key split across two blocks, an item larger than a block."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from relay.batches import submission
from relay.batches.submission import StreamedSubmission
from relay.domain.batches import BatchRejected, validate_submission


def read(body: bytes, max_items: int = 100, max_depth: int = 128) -> tuple[str, list[bytes]]:
    streamed = StreamedSubmission(io.BytesIO(body), max_items, max_depth)
    items = list(streamed)
    return streamed.shape, items


def refusal(body: bytes, max_items: int = 100, max_depth: int = 128) -> str:
    with pytest.raises(BatchRejected) as info:
        read(body, max_items, max_depth)
    return str(info.value)


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_items_come_back_as_a_whole_parse_gives_them_whatever_the_block(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    monkeypatch.setattr(submission, "_BLOCK", block)
    requests: list[Any] = [
        {"model": "m", "n": 123456789012, "f": 1.5e300, "s": "é" * 50 + '"\\', "deep": [[[{"a": None}]]]},
        {"big": "y" * 300, "t": True, "u": "\u2603\U0001f600"},
        {},
    ]
    body = (
        b'  {"x": {"ignored": [1, 2]}, "shape" : "anthropic",\n"requests":[ '
        + b" ,\n".join(orjson.dumps(r) for r in requests)
        + b' ] , "num": 1234567890123 }\n'
    )
    shape, items = read(body)
    assert shape == "anthropic"
    expected_shape, expected = validate_submission(orjson.loads(body), 100)
    assert (shape, items) == (expected_shape, [orjson.dumps(r) for r in expected])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", submission.NOT_AN_OBJECT),
        (b"[1]", submission.NOT_AN_OBJECT),
        (b'{"shape": "openai", "requests": [{}]', submission.NOT_AN_OBJECT),
        (b'{"shape": "openai", "requests": [{}]} {}', submission.NOT_AN_OBJECT),
        (b'{"shape": "openai", "requests": [{"a": "\xff"}]}', submission.NOT_AN_OBJECT),
        (b'{"shape": "openai", "requests": [{"a": NaN}]}', submission.NOT_AN_OBJECT),
        (b'{"requests": [{}]}', "shape is required: one of openai, anthropic, openai_responses"),
        (b'{"shape": "canonical", "requests": [{}]}', "shape 'canonical' cannot be batched"),
        (b'{"requests": [{}], "shape": 5}', "shape 5 cannot be batched"),
        (b'{"shape": "openai"}', "requests is required"),
        (b'{"shape": "openai", "requests": {"a": 1}}', "requests must be a list"),
        (b'{"shape": "openai", "requests": []}', "requests must not be empty"),
        (
            b'{"shape": "openai", "requests": [{}, {}, {}, {}]}',
            "at most 3 are allowed (RELAY_BATCH_MAX_ITEMS)",
        ),
        (b'{"shape": "openai", "requests": [{}, 7]}', "requests[1]: must be a JSON object"),
        (b'{"shape": "openai", "requests": [{}, {"stream": true}]}', "requests[1]: stream is not allowed"),
        (b'{"shape": "openai", "requests": [{"a": [[[[1]]]]}]}', "requests[0]: nests deeper than 4 levels"),
        (b'{"shape": "openai", "requests": [{"a": "\\ud800"}]}', "requests[0]: "),
        (b'{"shape": "openai", "shape": "openai", "requests": [{}]}', "shape appears more than once"),
    ],
)
def test_refusals_name_the_problem(body: bytes, message: str) -> None:
    assert message in refusal(body, max_items=3, max_depth=4)


def test_a_refusal_comes_from_the_iteration_after_the_good_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store writing the bodies as they come gets the refusal mid-way and gives up (nothing kept)."""
    monkeypatch.setattr(submission, "_BLOCK", 16)
    streamed = StreamedSubmission(
        io.BytesIO(b'{"shape": "openai", "requests": [{"a": 1}, {"b": 2}, 3]}'), 10, 10
    )
    got = iter(streamed)
    assert next(got) == b'{"a":1}' and next(got) == b'{"b":2}'
    with pytest.raises(BatchRejected, match=r"requests\[2\]: must be a JSON object"):
        next(got)
