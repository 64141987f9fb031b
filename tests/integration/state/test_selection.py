"""Contract: key-selection state (SPEC §6): round-robin counters, last-use order, and ``pick_state``
(breakers + counter in one step), identical on MemoryState and RedisState."""

from __future__ import annotations

import asyncio

from relay.state import SharedState


async def test_counters_start_at_one_and_are_per_name(state: SharedState) -> None:
    assert [await state.next_counter("pool-a") for _ in range(3)] == [1, 2, 3]
    assert await state.next_counter("pool-b") == 1


async def test_concurrent_increments_are_never_lost(state: SharedState) -> None:
    values = await asyncio.gather(*(state.next_counter("rr") for _ in range(25)))
    assert sorted(values) == list(range(1, 26))


async def test_least_recent_orders_never_used_first_then_oldest(state: SharedState) -> None:
    assert await state.least_recent("pool", []) == []
    assert await state.least_recent("pool", ["a", "b", "c"]) == ["a", "b", "c"]
    await state.touch("pool", "b", 1000.0)
    await state.touch("pool", "a", 2000.0)
    assert await state.least_recent("pool", ["a", "b", "c", "d"]) == ["c", "d", "b", "a"]
    await state.touch("pool", "b", 3000.0)  # a later use moves b to the back
    assert await state.least_recent("pool", ["a", "b", "c", "d"]) == ["c", "d", "a", "b"]
    assert await state.least_recent("other-pool", ["b", "a"]) == ["b", "a"]


async def test_least_recent_ties_keep_the_given_order(state: SharedState) -> None:
    for member in ("x", "y", "z"):
        await state.touch("pool", member, 1234.5)
    assert await state.least_recent("pool", ["z", "x", "y"]) == ["z", "x", "y"]
    assert await state.least_recent("pool", ["y", "z", "x"]) == ["y", "z", "x"]


async def test_pick_state_returns_breakers_and_advances_the_counter(state: SharedState) -> None:
    tripped = await state.trip("k2", reason="upstream_5xx", version="v1")
    assert await state.pick_state(["k1", "k2", "k3"], "rr") == ({"k2": tripped}, 1)
    assert await state.pick_state(["k1", "k2", "k3"], "rr") == ({"k2": tripped}, 2)
    assert await state.pick_state(["k1", "k2", "k3"], None) == ({"k2": tripped}, None)
    assert await state.pick_state([], "rr") == ({}, 3)
    assert await state.pick_state([], None) == ({}, None)
    assert await state.next_counter("rr") == 4
