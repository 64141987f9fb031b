"""Paced admission in blocks (SPEC §17), on the real worker pool over a real store (SQLite and
Postgres), real shared state and the real fake upstream: the items of a paced policy in hand are
admitted together (far fewer state calls than items), never past the batch share, and live traffic
still finds ``limit − share`` of the window afterwards.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from relay.errors import RateLimited
from relay.request.ratelimit import RateLimiter
from relay.state import LimitCheck, MemoryState, Verdict
from tests.fixtures.fake_upstream import FakeUpstream
from tests.integration.batches.pacing_harness import PacingBed

CHAT_PATH = "/v1/chat/completions"


class CountedState(MemoryState):
    """The real in-memory state, counting its admission calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    async def reserve(self, checks: Sequence[LimitCheck], lease_id: str, lease_s: float) -> Verdict:
        self.calls["reserve"] += 1
        return await super().reserve(checks, lease_id, lease_s)

    async def reserve_many(self, checks: Sequence[LimitCheck], n: int) -> tuple[int, Verdict]:
        self.calls["reserve_many"] += 1
        return await super().reserve_many(checks, n)


@pytest.mark.parametrize("pool_size", [4, 16])
async def test_a_paced_policys_items_are_admitted_in_blocks_up_to_the_share(
    engine: AsyncEngine, fake: FakeUpstream, tmp_path: Path, pool_size: int
) -> None:
    state = CountedState()
    paced = PacingBed(engine, state, fake.base_url, tmp_path / "payloads")
    # One window for the whole test: 60 requests, 40 % kept for live traffic → a batch share of 36.
    tenant = paced.tenant(
        "blocks",
        rules=({"meter": "requests", "limit": 60, "window": "9999999s"},),
        pacing="wait",
        live_reserve=0.4,
    )
    async with paced.pool(size=pool_size):
        batch_id = await paced.submit(tenant, 50)
        await paced.wait_for_states(batch_id, {"completed": 36, "available": 14})
    assert await paced.errors(batch_id) == []
    assert len([r for r in fake.requests(limit=200) if r["path"] == CHAT_PATH]) == 36
    admissions = state.calls["reserve"] + state.calls["reserve_many"]
    assert state.calls["reserve_many"] >= 1
    assert admissions < 36 / 2  # blocks of several items, not one call per item
    # Live requests still find the 24 the share leaves, and not one more.
    limiter = RateLimiter(state)
    admitted = 0
    for _ in range(30):
        try:
            await limiter.reserve(tenant.policy, tenant.key_id)
        except RateLimited:
            continue
        admitted += 1
    assert admitted == 24
