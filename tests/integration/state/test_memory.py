"""MemoryState-only: its periodic sweep keeps memory bounded by live entries (Redis uses key TTLs)."""

from __future__ import annotations

import time

from relay.state import LimitCheck, MemoryState


async def test_sweep_forgets_ended_windows_idle_leases_and_old_breakers() -> None:
    state = MemoryState()
    checks = [LimitCheck("w", "window", 5, 60, 1), LimitCheck("c", "concurrency", 5)]
    assert (await state.reserve(checks, "lease", 30)).admitted
    await state.trip("k", reason="upstream_5xx", version="v1")
    state._sweep(time.time())
    assert (state._windows, state._leases, state._breakers) != ({}, {}, {})
    state._sweep(time.time() + 3600)  # an hour later nothing above is live
    assert (state._windows, state._leases, state._breakers) == ({}, {}, {})
