"""Pacing in the batch engine (SPEC §17), on the real worker pool over a real store (SQLite and Postgres),
real shared state and the real fake upstream: under ``pacing: "wait"`` a batch far larger than its
policy's limits finishes with no rate-limit failures and never sends more than the batch share per
window; an item without room holds no worker slot; budgets are never paced; ``pacing: "fail"`` keeps
§10.4's rule; items wait out open keys.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.state import MemoryState, SharedState
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.windows import over_allowance
from tests.integration.batches.pacing_harness import PacingBed

CHAT_PATH = "/v1/chat/completions"


@pytest.fixture
async def memory() -> AsyncIterator[MemoryState]:
    state = MemoryState()
    yield state
    await state.close()


def bed(engine: AsyncEngine, state: SharedState, fake: FakeUpstream, tmp_path: Path) -> PacingBed:
    return PacingBed(engine, state, fake.base_url, tmp_path / "payloads")


async def open_key(state: SharedState, paced: PacingBed, seconds: float) -> None:
    key = paced.key
    await state.trip(key.id, reason="upstream_rate_limited", version=key.version, retry_after=seconds)


async def test_a_paced_batch_finishes_without_failures_and_within_the_share_per_window(
    engine: AsyncEngine, state: SharedState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, state, fake, tmp_path)
    # 8 requests per 2 s, half kept for live traffic: batch items get 4 per window.
    tenant = paced.tenant(
        "paced", rules=({"meter": "requests", "limit": 8, "window": "2s"},), pacing="wait", live_reserve=0.5
    )
    async with paced.pool(size=4):
        batch_id = await paced.submit(tenant, 20)
        assert await paced.finished(batch_id, 20) == {"completed": 20}
    assert await paced.errors(batch_id) == []
    sent = [r["ts"] for r in fake.requests(limit=200) if r["path"] == CHAT_PATH]
    assert len(sent) == 20
    assert over_allowance(sent, 2, 4) == []  # 4 per window, however the arrivals straddle a boundary
    assert len({math.floor(ts / 2) for ts in sent}) >= 3  # 5 windows of admissions, arrivals within +1
    assert paced.metric("relay_batch_pacing_waits_total", policy=tenant.policy.id, meter="requests") >= 1


async def test_a_held_item_holds_no_slot_other_policies_run_meanwhile(
    engine: AsyncEngine, memory: MemoryState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, memory, fake, tmp_path)
    starved = paced.tenant(
        "starved", rules=({"meter": "requests", "limit": 1, "window": "9999999s"},), pacing="wait"
    )
    free = paced.tenant("free")
    async with paced.pool(size=1):  # one slot: a waiting item holding it would stop everything
        held_id = await paced.submit(starved, 3)
        free_id = await paced.submit(free, 10)
        assert await paced.finished(free_id, 10) == {"completed": 10}
        # The starved batch's first item ran; the others wait, available, not failed.
        assert await paced.states(held_id) == {"completed": 1, "available": 2}
        assert paced.metric("relay_batch_items_waiting", policy=starved.policy.id) >= 1
    assert await paced.errors(held_id) == []
    assert await paced.states(held_id) == {"completed": 1, "available": 2}  # stop put them back


async def test_a_spent_budget_still_fails_items_under_wait(
    engine: AsyncEngine, memory: MemoryState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, memory, fake, tmp_path)
    budget = ({"meter": "cost_usd", "limit": 0.000001, "window": "1d"},)
    tenant = paced.tenant("budgeted", rules=budget, pacing="wait", live_reserve=0.5)
    async with paced.pool(size=1):
        batch_id = await paced.submit(tenant, 3)
        states = await paced.finished(batch_id, 3)
    assert states == {"completed": 1, "discarded": 2}
    errors = await paced.errors(batch_id)
    assert len(errors) == 2 and all(e.startswith("budget exceeded: ") for e in errors), errors


async def test_pacing_fail_keeps_the_rate_limit_failure_of_10_4(
    engine: AsyncEngine, memory: MemoryState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, memory, fake, tmp_path)
    rules = ({"meter": "requests", "limit": 2, "window": "9999999s"},)
    tenant = paced.tenant("failing", rules=rules, pacing="fail", live_reserve=0.5)  # share 1
    async with paced.pool(size=1):
        batch_id = await paced.submit(tenant, 3)
        assert await paced.finished(batch_id, 3) == {"completed": 1, "discarded": 2}
    errors = await paced.errors(batch_id)
    assert len(errors) == 2
    assert all(e.startswith('rate limit exceeded: policy "failing" allows 2 requests') for e in errors)
    assert paced.metric("relay_batch_pacing_waits_total", policy=tenant.policy.id, meter="requests") == 0


async def test_items_wait_out_open_keys_and_complete_once_the_key_reopens(
    engine: AsyncEngine, memory: MemoryState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, memory, fake, tmp_path)
    tenant = paced.tenant("patient", pacing="wait")
    # The host's only key is open for 2 s (a long 429 would do the same): no healthy keys until then.
    await open_key(memory, paced, 2.0)
    async with paced.pool(size=2):
        batch_id = await paced.submit(tenant, 3)
        assert await paced.finished(batch_id, 3) == {"completed": 3}
    assert await paced.errors(batch_id) == []
    assert paced.metric("relay_batch_pacing_waits_total", policy=tenant.policy.id, meter="open_keys") >= 1
    assert len([r for r in fake.requests() if r["path"] == CHAT_PATH]) == 3


async def test_open_keys_still_fail_items_under_pacing_fail(
    engine: AsyncEngine, memory: MemoryState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, memory, fake, tmp_path)
    tenant = paced.tenant("impatient")
    await open_key(memory, paced, 60.0)
    async with paced.pool(size=1):
        batch_id = await paced.submit(tenant, 2)
        assert await paced.finished(batch_id, 2) == {"discarded": 2}
    errors = await paced.errors(batch_id)
    assert all(e.startswith('no healthy keys for host "pace-host"') for e in errors), errors


async def test_max_concurrency_runs_one_item_at_a_time_on_a_pool_of_four(
    engine: AsyncEngine, memory: MemoryState, fake: FakeUpstream, tmp_path: Path
) -> None:
    paced = bed(engine, memory, fake, tmp_path)
    tenant = paced.tenant("single", pacing="wait", max_concurrency=1)
    fake.configure(latency_ms=300)
    try:
        async with paced.pool(size=4):
            batch_id = await paced.submit(tenant, 4)
            assert await paced.finished(batch_id, 4) == {"completed": 4}
        arrivals = sorted(r["ts"] for r in fake.requests() if r["path"] == CHAT_PATH)
    finally:
        fake.reset()  # the session's fake upstream serves other tests next
    assert await paced.errors(batch_id) == []
    assert len(arrivals) == 4
    # One at a time: each request reached the upstream only after the previous one's 300 ms answer.
    assert all(later - earlier >= 0.28 for earlier, later in itertools.pairwise(arrivals))
    waits = paced.metric("relay_batch_pacing_waits_total", policy=tenant.policy.id, meter="max_concurrency")
    assert waits >= 1
