"""BlockAdmissions (SPEC §17 pacing): a paced policy's items in hand are admitted as one block; the
grant serves the policy's next items without another state call, only within its window and only for
the same policy object; ``left`` and ``covers`` tell the worker pool whether the next item may start
from the grant.
Over the real ``Pipeline`` and limiter on a real ``MemoryState``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

import pytest

from relay.batches.admissions import SEND_MARGIN_S, BlockAdmissions
from relay.domain.batch_policy import BatchPolicy
from relay.errors import RateLimited
from relay.request.auth import Principal, build_principal
from relay.request.reservations import EMPTY_RESERVATION, BatchRefused
from relay.snapshot import Policy
from tests.fixtures.planes import RequestCore, request_core
from tests.unit.request.limit_records import policy, rule


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def core() -> AsyncIterator[RequestCore]:
    async with request_core() as built:
        yield built


def principal(pol: Policy) -> Principal:
    return build_principal(
        pol,
        key_hash="0" * 64,
        credential_id="key_a",
        principal_kind="serviceaccount",
        principal_id="sa_a",
        project_id="prj_a",
        team_id="tm_a",
    )


def paced(limit: int, window: str = "9999999s", **block: object) -> Policy:
    pol = policy([rule("requests", limit, window)])
    return dataclasses.replace(pol, batch=BatchPolicy.model_validate({"pacing": "wait", **block}))


async def live_admitted(core: RequestCore, pol: Policy, n: int) -> int:
    admitted = 0
    for _ in range(n):
        try:
            await core.pipeline.admit_batch(principal(dataclasses.replace(pol, batch=BatchPolicy())))
        except RateLimited:
            continue
        admitted += 1
    return admitted


async def test_a_block_serves_the_policys_next_items_then_they_wait(core: RequestCore) -> None:
    admissions = BlockAdmissions(core.pipeline)
    pol = paced(10, live_reserve=0.5)  # share 5
    who = principal(pol)
    assert await admissions.admit(who, demand=8) is EMPTY_RESERVATION  # a block of 5: the share
    assert admissions.left(pol.id) == 4 and admissions.covers(pol.id, on_the_way=3)
    assert not admissions.covers(pol.id, on_the_way=4)  # the fifth waits for the next block
    assert await live_admitted(core, pol, 10) == 5  # the block is counted already: live keeps 5
    for _ in range(4):  # the grant's other four, with no state call (the window is full)
        assert await admissions.admit(who, demand=8) is EMPTY_RESERVATION
    assert admissions.left(pol.id) == 0
    with pytest.raises(BatchRefused):
        await admissions.admit(who, demand=8)


async def test_demand_of_one_is_admitted_alone(core: RequestCore) -> None:
    admissions = BlockAdmissions(core.pipeline)
    pol = paced(10, live_reserve=0.5)
    await admissions.admit(principal(pol), demand=1)
    assert await live_admitted(core, pol, 10) == 9  # one counted, not a block


async def test_a_policy_not_admitted_in_blocks_is_never_held_for_one(core: RequestCore) -> None:
    admissions = BlockAdmissions(core.pipeline)
    assert admissions.covers("pol_never_blocked", on_the_way=16)
    pol = paced(100, live_reserve=0.5)  # share 50
    await admissions.admit(principal(pol), demand=3)  # 3 of 3 granted: more room is left
    assert admissions.left(pol.id) == 2
    assert await live_admitted(core, pol, 100) == 97


async def test_a_grant_lapses_before_its_window_ends(core: RequestCore) -> None:
    clock = Clock()
    admissions = BlockAdmissions(core.pipeline, clock=clock)
    pol = paced(1000, window="3600s", live_reserve=0.5)  # share 500
    who = principal(pol)
    window_end = clock.now - clock.now % 3600 + 3600
    await admissions.admit(who, demand=600)  # 500 granted, one of them used now
    assert admissions.left(pol.id) == 499
    clock.now = window_end - SEND_MARGIN_S  # too late to reach the upstream inside the window
    assert admissions.left(pol.id) == 0
    with pytest.raises(BatchRefused):  # the grant is void; the limiter is asked again (still full)
        await admissions.admit(who, demand=5)


async def test_a_changed_policy_starts_over(core: RequestCore) -> None:
    admissions = BlockAdmissions(core.pipeline)
    pol = paced(10, live_reserve=0.5)
    await admissions.admit(principal(pol), demand=5)  # the share, 5: 4 left in the grant
    reloaded = dataclasses.replace(pol)  # the same policy after a catalog reload: a new object
    with pytest.raises(BatchRefused):  # its grant is not this object's; the window is full
        await admissions.admit(principal(reloaded), demand=5)


async def test_a_spent_share_waits_for_the_window_end_without_asking_again(core: RequestCore) -> None:
    clock = Clock()
    admissions = BlockAdmissions(core.pipeline, clock=clock)
    pol = paced(10, window="3600s", live_reserve=0.5)  # share 5
    who = principal(pol)
    window_end = clock.now - clock.now % 3600 + 3600
    await admissions.admit(who, demand=8)  # cut short at 5: the window's share is spent
    for _ in range(4):
        await admissions.admit(who, demand=8)
    with pytest.raises(BatchRefused) as early:  # right after the block: 100 ms between tries at least
        await admissions.admit(who, demand=8)
    assert early.value.exact and early.value.share == 5
    assert early.value.retry_after == pytest.approx(window_end - clock.now, abs=2)
    clock.now = window_end - 0.03  # late in the window: wait for its end, not 100 ms past it
    with pytest.raises(BatchRefused) as late:
        await admissions.admit(who, demand=8)
    assert late.value.exact and late.value.retry_after == pytest.approx(0.03)


async def test_a_spent_share_is_asked_again_once_the_policy_changed(core: RequestCore) -> None:
    admissions = BlockAdmissions(core.pipeline)
    pol = paced(10, live_reserve=0.5)  # share 5
    await admissions.admit(principal(pol), demand=8)  # cut short: spent for this policy object
    raised = paced(20, live_reserve=0.5)  # the limit was raised: share 10, same counter
    assert await admissions.admit(principal(raised), demand=3) is EMPTY_RESERVATION  # asked, granted
    assert await live_admitted(core, raised, 20) == 20 - 5 - 3  # the block of 3 was counted
