"""``PolicySpec.batch`` (SPEC §17): the block a policy is written with, validated by the control
plane's one body-validation rule, every message naming ``batch.<field>``."""

from __future__ import annotations

from typing import Any

import pytest

from relay.control.kinds import shown_batch_block, stored_batch_block
from relay.control.services.validation import validated
from relay.domain.batch_policy import DEFAULT_BATCH_POLICY, BatchPolicy
from relay.domain.kind_specs import PolicySpec
from relay.errors import InvalidRequest


def test_absent_or_null_block_is_the_defaults() -> None:
    assert validated(PolicySpec, {"name": "p"}).batch == DEFAULT_BATCH_POLICY
    assert validated(PolicySpec, {"name": "p", "batch": None}).batch == DEFAULT_BATCH_POLICY
    assert validated(PolicySpec, {"name": "p", "batch": {}}).batch == DEFAULT_BATCH_POLICY


def test_every_field_is_read() -> None:
    block = {"pacing": "wait", "live_reserve": 0.25, "max_concurrency": 3, "translate": True}
    assert validated(PolicySpec, {"name": "p", "batch": block}).batch == BatchPolicy(**block)
    assert (
        validated(PolicySpec, {"name": "p", "batch": {"max_concurrency": None}}).batch.max_concurrency is None
    )


@pytest.mark.parametrize("zero", [0, 0.0])
def test_an_integer_zero_reserve_is_zero_but_a_boolean_never_is(zero: float) -> None:
    spec = validated(PolicySpec, {"name": "p", "batch": {"live_reserve": zero}})
    assert spec.batch.live_reserve == 0.0 and isinstance(spec.batch.live_reserve, float)
    assert spec.batch.is_default
    with pytest.raises(InvalidRequest, match=r"^batch\.live_reserve: "):
        validated(PolicySpec, {"name": "p", "batch": {"live_reserve": False}})


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"pacing": "later"}, "batch.pacing: Input should be 'fail' or 'wait'"),
        ({"pacing": None}, "batch.pacing: "),
        ({"live_reserve": 0.91}, "batch.live_reserve: Input should be less than or equal to 0.9"),
        ({"live_reserve": -0.1}, "batch.live_reserve: Input should be greater than or equal to 0"),
        ({"live_reserve": 1}, "batch.live_reserve: Input should be less than or equal to 0.9"),
        ({"live_reserve": "0.2"}, "batch.live_reserve: Input should be a valid number"),
        ({"live_reserve": True}, "batch.live_reserve: Input should be a valid number"),
        ({"live_reserve": float("nan")}, "batch.live_reserve: "),
        ({"max_concurrency": 0}, "batch.max_concurrency: Input should be greater than or equal to 1"),
        ({"max_concurrency": 2.0}, "batch.max_concurrency: Input should be a valid integer"),
        ({"max_concurrency": "4"}, "batch.max_concurrency: Input should be a valid integer"),
        ({"max_concurrency": True}, "batch.max_concurrency: Input should be a valid integer"),
        ({"translate": "yes"}, "batch.translate: Input should be a valid boolean"),
        ({"translate": 1}, "batch.translate: Input should be a valid boolean"),
        ({"paced": "wait"}, "batch.paced: Extra inputs are not permitted"),
        ([], "batch: "),
        ("wait", "batch: "),
    ],
)
def test_bad_values_are_refused_naming_the_field(block: Any, message: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        validated(PolicySpec, {"name": "p", "batch": block})
    assert raised.value.message.startswith(message), raised.value.message


def test_the_defaults_are_stored_as_sql_null_and_shown_whole() -> None:
    assert str(stored_batch_block(DEFAULT_BATCH_POLICY.model_dump())) == "NULL"
    chosen = BatchPolicy(pacing="wait", live_reserve=0.2).model_dump()
    assert stored_batch_block(chosen) == chosen
    assert shown_batch_block(None) == DEFAULT_BATCH_POLICY.model_dump()
    assert shown_batch_block({"pacing": "wait"}) == {**DEFAULT_BATCH_POLICY.model_dump(), "pacing": "wait"}
