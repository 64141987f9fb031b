"""The policy's ``cache`` block as a value (SPEC §19): TTL forms and bounds, scopes, defaults."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from relay.domain.cache_policy import MAX_TTL_S, CachePolicy, ttl_seconds


@pytest.mark.parametrize(
    ("ttl", "seconds"), [("1s", 1), ("90s", 90), ("10m", 600), ("2h", 7200), ("30d", MAX_TTL_S)]
)
def test_a_ttl_is_a_whole_number_of_seconds_minutes_hours_or_days(ttl: str, seconds: int) -> None:
    assert ttl_seconds(ttl) == seconds
    assert CachePolicy(ttl=ttl).ttl_s == seconds


def test_the_defaults_are_project_scope_with_streams() -> None:
    assert CachePolicy(ttl="1h").model_dump() == {"ttl": "1h", "scope": "project", "streams": True}


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"ttl": "31d"}, "ttl"),
        ({"ttl": "2592001s"}, "ttl"),
        ({"ttl": "0s"}, "ttl"),
        ({"ttl": "1w"}, "ttl"),
        ({"ttl": "1.5h"}, "ttl"),
        ({"ttl": " 1h"}, "ttl"),
        ({"ttl": 60}, "ttl"),
        ({}, "ttl"),
        ({"ttl": "1h", "scope": "team"}, "scope"),
        ({"ttl": "1h", "streams": "no"}, "streams"),
        ({"ttl": "1h", "stream": False}, "stream"),
    ],
)
def test_a_bad_block_names_its_field(block: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CachePolicy.model_validate(block)
    assert caught.value.errors()[0]["loc"][0] == field
