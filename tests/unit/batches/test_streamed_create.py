"""A spooled Message Batches create (``StreamedCreate``) refuses what a create parsed whole refuses
(``validate_create``), with the same message, and yields the same items and custom_ids."""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from relay.batch_apis.anthropic_create import StreamedCreate, validate_create
from relay.domain.batches import BatchRejected

PARAMS = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


def request(custom_id: str, **extra: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "params": {**PARAMS, **extra}}


def streamed(body: Any, max_items: int = 10) -> tuple[list[bytes], list[str]]:
    create = StreamedCreate(io.BytesIO(orjson.dumps(body)), max_items, 64)
    items = list(create)
    return items, create.custom_ids


BODIES: list[Any] = [
    [],
    {"requests": []},
    {},
    {"requests": {"custom_id": "a"}},
    {"requests": [request("a"), "nope"]},
    {"requests": [{"params": PARAMS}]},
    {"requests": [request("a"), request("")]},
    {"requests": [request("x" * 65)]},
    {"requests": [request("a.b")]},
    {"requests": [request("a\n")]},
    {"requests": [{"custom_id": 7, "params": PARAMS}]},
    {"requests": [request("a"), request("b"), request("a")]},
    {"requests": [{"custom_id": "a"}]},
    {"requests": [{"custom_id": "a", "params": [1]}]},
    {"requests": [request("a"), request("b", stream=True)]},
    {"requests": [{**request("a"), "extra": 1}]},
]


@pytest.mark.parametrize("body", BODIES)
def test_a_streamed_create_refuses_as_a_whole_one_does(body: Any) -> None:
    with pytest.raises(BatchRejected) as whole:
        validate_create(body, 10)
    with pytest.raises(BatchRejected) as stream:
        streamed(body)
    assert str(stream.value) == str(whole.value)


def test_a_streamed_create_yields_what_a_whole_one_does() -> None:
    body = {"note": {"kept": "aside"}, "requests": [request("a"), request("b", temperature=0.5)]}
    params, custom_ids = validate_create(body, 10)
    assert streamed(body) == ([orjson.dumps(p) for p in params], custom_ids)
    assert custom_ids == ["a", "b"]


def test_more_requests_than_the_limit_are_refused_without_reading_on() -> None:
    with pytest.raises(BatchRejected, match=r"requests: more than 2 requests; the limit is 2"):
        streamed({"requests": [request("a"), request("b"), request("c")]}, max_items=2)


def test_a_key_given_twice_is_refused() -> None:
    source = io.BytesIO(b'{"requests": [' + orjson.dumps(request("a")) + b'], "requests": []}')
    with pytest.raises(BatchRejected, match="requests appears more than once"):
        list(StreamedCreate(source, 10, 64))
