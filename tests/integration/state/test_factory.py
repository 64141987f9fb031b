"""``open_state`` follows ``RELAY_REDIS_URL`` (SPEC §1) and does no I/O when it builds the state."""

from __future__ import annotations

from relay.state import MemoryState, RedisState, SharedState, open_state


async def test_open_state_picks_the_implementation() -> None:
    assert isinstance(open_state(None), MemoryState)
    assert isinstance(open_state(""), MemoryState)
    redis_state = open_state("redis://127.0.0.1:1/0", prefix="relay-test-factory:")  # never connects
    assert isinstance(redis_state, RedisState)
    assert isinstance(redis_state, SharedState)
    assert redis_state.prefix == "relay-test-factory:"
    await redis_state.close()
