"""A paced policy's reopened window is claimed in steps (relay.batches.rooms): never more than its
share, nothing while it is held, nothing left over once the window is spent or the policy has no more
items."""

from __future__ import annotations

import pytest

from relay.batches.holds import PolicyHolds
from relay.batches.rooms import MAX_ROOM_CLAIM, WindowRooms


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def held_rooms(step: int, share: int) -> tuple[Clock, PolicyHolds, WindowRooms]:
    clock = Clock()
    holds = PolicyHolds(clock)
    rooms = WindowRooms(holds, step)
    holds.hold("p", 1.0, "requests")
    rooms.learn("p", share)
    return clock, holds, rooms


def test_nothing_is_claimed_while_the_policy_is_held() -> None:
    _clock, _holds, rooms = held_rooms(step=64, share=200)
    assert rooms.next_claim() == (set(), 0)


def test_a_reopened_share_is_claimed_in_steps_that_add_up_to_it() -> None:
    clock, _holds, rooms = held_rooms(step=64, share=200)
    clock.now += 1.0
    steps = []
    while (claim := rooms.next_claim())[1]:
        assert claim[0] == {"p"}
        steps.append(claim[1])
    assert steps == [64, 64, 64, 8]


def test_the_share_claimed_is_capped() -> None:
    clock, _holds, rooms = held_rooms(step=10_000, share=50_000)
    clock.now += 1.0
    assert rooms.next_claim() == ({"p"}, MAX_ROOM_CLAIM)
    assert rooms.next_claim() == (set(), 0)


def test_the_rest_lapses_when_the_policy_is_held_again() -> None:
    clock, holds, rooms = held_rooms(step=64, share=200)
    clock.now += 1.0
    assert rooms.next_claim() == ({"p"}, 64)
    holds.hold("p", 1.0, "requests")  # the window's share is spent before the rest was claimed
    assert rooms.next_claim() == (set(), 0)
    clock.now += 1.0
    assert rooms.next_claim() == (set(), 0)  # nothing learnt again: nothing to claim


def test_the_rest_lapses_when_a_claim_finds_no_more_items() -> None:
    clock, _holds, rooms = held_rooms(step=64, share=200)
    clock.now += 1.0
    policies, _ = rooms.next_claim()
    rooms.exhausted(policies)
    assert rooms.next_claim() == (set(), 0)


def test_a_new_hold_replaces_what_was_left() -> None:
    clock, holds, rooms = held_rooms(step=64, share=200)
    clock.now += 1.0
    rooms.next_claim()
    holds.hold("p", 1.0, "requests")
    rooms.learn("p", 30)
    clock.now += 1.0
    assert rooms.next_claim() == ({"p"}, 30)
    assert rooms.next_claim() == (set(), 0)


def test_a_step_takes_at_least_one_item() -> None:
    with pytest.raises(ValueError, match="at least one"):
        WindowRooms(PolicyHolds(), 0)
