"""The retry body (SPEC §17 "Retry"): defaults, the selection it makes, and a 400 naming the field for
anything else."""

from __future__ import annotations

from typing import Any

import pytest

from relay.domain.batch_retry import RetrySelection, parse_retry_body
from relay.errors import InvalidRequest


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (None, RetrySelection(("discarded", "cancelled"), None)),
        ({}, RetrySelection(("discarded", "cancelled"), None)),
        ({"states": None, "errors": None}, RetrySelection(("discarded", "cancelled"), None)),
        ({"states": ["cancelled"]}, RetrySelection(("cancelled",), None)),
        (
            {"states": ["cancelled", "discarded", "cancelled"]},
            RetrySelection(("discarded", "cancelled"), None),
        ),
        (
            {"errors": ["routing: ", "timeout: ", "routing: "]},
            RetrySelection(("discarded", "cancelled"), ("routing: ", "timeout: ")),
        ),
        ({"states": ["discarded"], "errors": [""]}, RetrySelection(("discarded",), ("",))),
    ],
)
def test_selections(body: Any, expected: RetrySelection) -> None:
    assert parse_retry_body(body) == expected


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the body must be a JSON object"),
        ("states", "the body must be a JSON object"),
        ({"states": ["discarded"], "extra": 1}, "extra: unknown field"),
        ({"states": "cancelled"}, "states must be a list of strings"),
        ({"states": {"a": 1}}, "states must be a list of strings"),
        ({"states": []}, "states must not be empty"),
        ({"states": ["completed"]}, "states[0]: unknown state 'completed'"),
        ({"states": ["discarded", "available"]}, "states[1]: unknown state 'available'"),
        ({"states": ["discarded", None]}, "states[1]: must be a string"),
        ({"errors": 3}, "errors must be a list of strings"),
        ({"errors": []}, "errors must not be empty"),
        ({"errors": ["a", 1]}, "errors[1]: must be a string"),
        ({"errors": ["x"] * 101}, "errors: at most 100 prefixes"),
        ({"errors": ["ok", "x" * 1001]}, "errors[1]: a prefix is at most 1000 characters"),
    ],
)
def test_refusals_name_the_field(body: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_retry_body(body)
    assert message in str(refused.value)
    assert refused.value.status == 400
