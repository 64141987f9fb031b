"""PolicyHolds (SPEC §17): a held policy stays held for its time (never less than 100 ms), a longer hold
is not shortened, and a ``max_concurrency`` hold is lifted when a lease frees on this replica."""

from __future__ import annotations

import pytest

from relay.batches.holds import MIN_HOLD_S, PolicyHolds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_hold_lasts_its_time_and_never_less_than_the_minimum() -> None:
    clock = Clock()
    holds = PolicyHolds(clock)
    assert holds.hold("pol_a", 0.0, "requests") == MIN_HOLD_S
    assert holds.held() == ("pol_a",) and holds.is_held("pol_a")
    clock.now += MIN_HOLD_S
    assert holds.held() == () and not holds.is_held("pol_a")


def test_a_longer_hold_is_not_shortened_by_a_shorter_one() -> None:
    clock = Clock()
    holds = PolicyHolds(clock)
    holds.hold("pol_a", 5.0, "requests")
    holds.hold("pol_a", 1.0, "tokens")
    clock.now += 2.0
    assert holds.is_held("pol_a")
    clock.now += 3.0
    assert not holds.is_held("pol_a")


def test_lift_ends_only_a_hold_of_that_meter() -> None:
    holds = PolicyHolds(Clock())
    holds.hold("pol_a", 1.0, "max_concurrency")
    holds.hold("pol_b", 1.0, "requests")
    holds.lift("pol_a", "max_concurrency")
    holds.lift("pol_b", "max_concurrency")
    assert holds.held() == ("pol_b",)


def test_a_hold_may_be_shorter_than_the_minimum_when_the_caller_kept_tries_apart() -> None:
    clock = Clock()
    holds = PolicyHolds(clock)
    assert holds.hold("pol_a", 0.03, "requests", minimum=0.0) == 0.03  # until the window's end
    assert holds.next_end() == pytest.approx(0.03)
    clock.now += 0.03
    assert not holds.is_held("pol_a") and holds.next_end() is None
