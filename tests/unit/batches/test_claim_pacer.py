"""How far a worker pool claims ahead (relay.batches.pacing): enough ready items to cover the claims'
own latency when items are fast, one item per slot when they are slow, never more than the cap."""

from __future__ import annotations

from relay.batches.pacing import CLAIM_EVERY_S, MAX_AHEAD_PER_SLOT, ClaimPacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(pacer: ClaimPacer, clock: Clock, *, finished: int, seconds: float, claim_s: float) -> None:
    """``finished`` items end over ``seconds``, then a claim that took ``claim_s`` returns items."""
    for _ in range(finished):
        pacer.finished()
    clock.now += seconds
    pacer.claimed(claim_s, got=16)


def test_a_new_pool_fills_its_slots_and_as_many_ready() -> None:
    pacer = ClaimPacer(16, clock=Clock())
    assert pacer.ready_target() == 16
    assert pacer.want(running=0, ready=0) == 32
    assert pacer.want(running=16, ready=16) == 0  # nothing missing
    assert pacer.want(running=16, ready=9) == 0  # less than half the target missing: wait for more
    assert pacer.want(running=16, ready=8) == 8  # half missing: one claim for all of it
    assert pacer.want(running=10, ready=2) == 20  # free slots count as missing too


def test_fast_items_and_slow_claims_raise_the_target() -> None:
    """1 000 items/s while a claim takes 30 ms: 30 items finish per claim, so 3 × 30 = 90 stay ready."""
    clock = Clock()
    pacer = ClaimPacer(16, clock=clock)
    for _ in range(20):
        run(pacer, clock, finished=100, seconds=0.1, claim_s=0.03)
    target = pacer.ready_target()
    assert 90 <= target <= 91  # (floating point)
    assert pacer.want(running=16, ready=0) == target
    assert pacer.want(running=16, ready=60) == 0  # a third missing
    assert pacer.want(running=16, ready=45) == target - 45


def test_fast_items_and_quick_claims_claim_about_every_interval() -> None:
    """2 000 items/s while a claim takes 2 ms: the latency rule alone keeps 12 ready, which made claims
    of a few items each; the target covers two intervals instead, so a claim (half the target) comes
    about every ``CLAIM_EVERY_S`` and takes what finished meanwhile."""
    clock = Clock()
    pacer = ClaimPacer(16, clock=clock)
    for _ in range(20):
        run(pacer, clock, finished=200, seconds=0.1, claim_s=0.002)
    target = pacer.ready_target()
    assert 2000 * 2 * CLAIM_EVERY_S <= target <= 2000 * 2 * CLAIM_EVERY_S + 1  # 100 (floating point)
    assert pacer.want(running=16, ready=target - 40) == 0  # 40 items: 20 ms of work missing, wait
    assert pacer.want(running=16, ready=target - 50) == 50  # 25 ms of work: one claim for it


def test_the_target_is_capped() -> None:
    clock = Clock()
    pacer = ClaimPacer(4, clock=clock)
    for _ in range(20):
        run(pacer, clock, finished=1000, seconds=0.1, claim_s=0.5)
    assert pacer.ready_target() == MAX_AHEAD_PER_SLOT * 4


def test_slow_items_keep_one_ready_item_per_slot() -> None:
    """200 ms items on 64 slots (320/s) and 10 ms claims: 3 × 3.2 items is less than a slot each."""
    clock = Clock()
    pacer = ClaimPacer(64, clock=clock)
    for _ in range(20):
        run(pacer, clock, finished=32, seconds=0.1, claim_s=0.01)
    assert pacer.ready_target() == 64


def test_idle_time_and_empty_claims_do_not_lower_the_rate() -> None:
    """An empty claim (nothing available) measures neither claims nor items: after an idle minute
    the next batch starts with the rate measured while items ran."""
    clock = Clock()
    pacer = ClaimPacer(16, clock=clock)
    for _ in range(20):
        run(pacer, clock, finished=100, seconds=0.1, claim_s=0.03)
    for _ in range(60):
        clock.now += 1
        pacer.claimed(0.001, got=0)
    assert 90 <= pacer.ready_target() <= 91
