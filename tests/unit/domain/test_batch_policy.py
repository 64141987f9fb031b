"""The policy's ``batch`` block as a value (SPEC §17): defaults, bounds, and the exact batch share."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from relay.domain.batch_policy import DEFAULT_BATCH_POLICY, BatchPolicy


def test_absent_block_keeps_the_10_4_rule() -> None:
    assert DEFAULT_BATCH_POLICY.pacing == "fail"
    assert DEFAULT_BATCH_POLICY.live_reserve == 0.0
    assert DEFAULT_BATCH_POLICY.max_concurrency is None
    assert DEFAULT_BATCH_POLICY.translate is False
    assert BatchPolicy.model_validate({}).is_default
    assert not BatchPolicy(pacing="wait").is_default


@pytest.mark.parametrize(
    ("limit", "reserve", "share"),
    [(10, 0.0, 10), (10, 0.3, 7), (10, 0.9, 1), (1, 0.5, 1), (600, 0.25, 450), (100, 0.7, 30), (7, 0.5, 3)],
)
def test_the_batch_share_is_floor_of_limit_times_one_minus_reserve_at_least_one(
    limit: int, reserve: float, share: int
) -> None:
    assert BatchPolicy(live_reserve=reserve).share(limit) == share


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"pacing": "later"}, "pacing"),
        ({"live_reserve": 0.95}, "live_reserve"),
        ({"live_reserve": -0.1}, "live_reserve"),
        ({"live_reserve": "0.5"}, "live_reserve"),
        ({"live_reserve": True}, "live_reserve"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_concurrency": 2.5}, "max_concurrency"),
        ({"max_concurrency": True}, "max_concurrency"),
        ({"translate": "yes"}, "translate"),
        ({"paced": "wait"}, "paced"),
    ],
)
def test_bad_values_are_refused_naming_the_field(body: dict, field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        BatchPolicy.model_validate(body)
    assert raised.value.errors()[0]["loc"] == (field,)
