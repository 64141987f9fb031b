from __future__ import annotations

import pytest

from relay.adapters import AdapterError, parse_request, wants_stream
from relay.errors import InvalidRequest


def test_parses_a_json_object_with_a_model() -> None:
    body = parse_request(b'{"model": "gpt-x", "messages": [], "n": 1.5}')
    assert body == {"model": "gpt-x", "messages": [], "n": 1.5}


@pytest.mark.parametrize(
    "raw", [b"", b"{", b"not json", b'{"model": "m",}', b"\xff\xfe", b'{"model": NaN}', b'{"a": Infinity}']
)
def test_bad_json_is_invalid_json(raw: bytes) -> None:
    with pytest.raises(AdapterError) as info:
        parse_request(raw)
    assert info.value.code == "invalid_json"
    assert info.value.status == 400


@pytest.mark.parametrize("raw", [b"[]", b'"model"', b"42", b"null", b'[{"model": "m"}]'])
def test_non_object_body_is_invalid_json(raw: bytes) -> None:
    with pytest.raises(AdapterError) as info:
        parse_request(raw)
    assert info.value.code == "invalid_json"
    assert "object" in info.value.message


@pytest.mark.parametrize(
    "raw",
    [b"{}", b'{"model": null}', b'{"model": 3}', b'{"model": ""}', b'{"model": "  "}', b'{"model": ["m"]}'],
)
def test_missing_or_non_string_model(raw: bytes) -> None:
    with pytest.raises(AdapterError) as info:
        parse_request(raw)
    assert info.value.code == "missing_model"


def test_adapter_error_is_part_of_the_relay_error_tree() -> None:
    error = AdapterError("invalid_json", "request body is not valid JSON")
    assert isinstance(error, InvalidRequest)
    assert (error.status, error.code, str(error)) == (400, "invalid_json", "request body is not valid JSON")


def test_accepts_an_integer_beyond_64_bits() -> None:
    body = parse_request(b'{"model": "m", "n": 123456789012345678901234567890}')
    assert body["n"] == pytest.approx(1.2345678901234568e29)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"model": "\\ud800"}', "'model'"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "a\\udfffb"}]}', "'messages[0].content'"),
        (b'{"model": "m", "x": {"\\ud800": 1}}', "a key of 'x'"),
    ],
)
def test_refuses_a_lone_surrogate_naming_the_field(raw: bytes, field: str) -> None:
    # SPEC §1: no encoder downstream (database driver, log, orjson) can write a lone surrogate.
    with pytest.raises(AdapterError) as info:
        parse_request(raw)
    assert info.value.code == "invalid_json"
    assert field in info.value.message and "surrogate" in info.value.message


@pytest.mark.parametrize("depth", [129, 300, 1025, 100_000])
def test_refuses_json_deeper_than_the_limit_naming_it(depth: int) -> None:
    raw = b'{"model": "m", "x": ' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(AdapterError) as info:
        parse_request(raw)
    assert info.value.code == "invalid_json"
    assert "deeper than" in info.value.message


def test_accepts_json_at_the_limit() -> None:
    raw = b'{"model": "m", "x": ' + b"[" * 127 + b"]" * 127 + b"}"
    assert parse_request(raw)["model"] == "m"
    assert parse_request(raw, max_depth=200)["model"] == "m"
    with pytest.raises(AdapterError):
        parse_request(raw, max_depth=100)


def test_accepts_memoryview_and_bytearray() -> None:
    assert parse_request(memoryview(b'{"model": "m"}'))["model"] == "m"
    assert parse_request(bytearray(b'{"model": "m"}'))["model"] == "m"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"stream": True}, True),
        ({"stream": False}, False),
        ({}, False),
        ({"stream": "true"}, False),
        ({"stream": 1}, False),
        ({"stream": None}, False),
    ],
)
def test_wants_stream(body: dict[str, object], expected: bool) -> None:
    assert wants_stream(body) is expected
