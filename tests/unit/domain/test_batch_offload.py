"""A binding's ``batch_offload`` value (SPEC §22): its defaults, its bounds, and which batches it sends
to the provider."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from relay.domain.batch_offload import NEVER, BatchOffload


def test_absent_is_never_and_shares_one_value() -> None:
    assert BatchOffload.from_json(None) is NEVER
    assert BatchOffload.from_json({}) is NEVER
    assert NEVER.mode == "never" and NEVER.min_items == 100 and NEVER.discount == 0.5
    assert not NEVER.offloads(1_000_000)


def test_native_offloads_from_min_items_on() -> None:
    offload = BatchOffload.from_json({"mode": "native", "min_items": 3, "discount": 0})
    assert offload.native and offload.discount == 0.0
    assert [offload.offloads(n) for n in (1, 2, 3, 4)] == [False, False, True, True]


@pytest.mark.parametrize(
    "value",
    [
        {"discount": 1.01},
        {"discount": -0.01},
        {"discount": float("nan")},
        {"min_items": 0},
        {"min_items": True},
        {"min_items": "5"},
        {"mode": "Native"},
        {"ratio": 0.5},
    ],
)
def test_out_of_bounds_values_are_refused(value: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        BatchOffload.model_validate({"mode": "native", **value})
