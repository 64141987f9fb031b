"""The login throttle's counting rules (SPEC §3.2 login, hardened): in one process without Redis, across
replicas through a real Redis, and back to this process's own counts when Redis does not answer (a
real refused connection, not a mock). Two ``relay serve`` replicas sharing it: ``test_login_replicas``."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from relay.control.services.throttle import ADDRESS_FAILURES, EMAIL_FAILURES, WINDOW_S, Attempt, LoginThrottle
from relay.errors import RateLimited
from relay.state import RedisState
from tests.fixtures.databases import missing_service
from tests.fixtures.live import live_redis_url
from tests.fixtures.relay_server import free_port


def away_from_a_window_boundary(margin_s: float = 40.0) -> None:
    """Shared counts live in fixed ``WINDOW_S`` windows (Redis's clock: this machine's): a run that
    crossed a boundary would start counting again halfway. Wait for a fresh window when one is near."""
    left = WINDOW_S - time.time() % WINDOW_S
    if left < margin_s:
        time.sleep(left + 0.5)


async def fail(
    throttle: LoginThrottle, email: str | None, address: str, times: int, now: float | None = None
) -> None:
    """``times`` wrong guesses: each attempt is reserved and kept."""
    for _ in range(times):
        await throttle.attempt(email, address, now)


async def allowed(throttle: LoginThrottle, email: str | None, address: str, now: float | None = None) -> None:
    """An attempt is admitted (raises otherwise); it is given back, so it counts for nothing."""
    await throttle.refund(await throttle.attempt(email, address, now))


async def test_one_process_without_redis_counts_per_email_and_per_address() -> None:
    throttle = LoginThrottle()
    await fail(throttle, "A@x.test ", "10.0.0.1", EMAIL_FAILURES, 0.0)
    with pytest.raises(RateLimited) as info:
        await throttle.attempt("a@x.test", "10.0.0.2", 10.0)  # the email, normalised, from anywhere
    assert "email" in str(info.value) and info.value.retry_after == pytest.approx(WINDOW_S - 10)
    await allowed(throttle, "b@x.test", "10.0.0.1", 10.0)  # another email from that address: not yet
    await allowed(throttle, "a@x.test", "10.0.0.2", WINDOW_S + 1)  # the sliding window let them go
    for n in range(ADDRESS_FAILURES - EMAIL_FAILURES):
        await fail(throttle, f"u{n}@x.test", "10.0.0.1", 1, 0.0)
    with pytest.raises(RateLimited, match="address"):
        await throttle.attempt("new@x.test", "10.0.0.1", 1.0)


async def test_a_success_clears_that_emails_local_failures() -> None:
    throttle = LoginThrottle()
    await fail(throttle, "a@x.test", "10.0.0.1", EMAIL_FAILURES - 1)
    await throttle.succeeded(await throttle.attempt("a@x.test", "10.0.0.2"))
    await fail(throttle, "a@x.test", "10.0.0.3", EMAIL_FAILURES - 1)  # would be 18 without the clear
    await allowed(throttle, "a@x.test", "10.0.0.3")


async def test_attempts_are_counted_before_verifying_so_concurrent_guesses_cannot_pass_together() -> None:
    """Every attempt is reserved at once; the verdict (a slow argon2 check here) comes later."""
    throttle = LoginThrottle()
    verified = 0

    async def guess() -> None:
        nonlocal verified
        await throttle.attempt("a@x.test", "10.0.0.1")
        await asyncio.sleep(0.01)  # the password check, while the other guesses arrive
        verified += 1

    answers = await asyncio.gather(*(guess() for _ in range(50)), return_exceptions=True)
    assert verified == EMAIL_FAILURES
    assert sum(isinstance(a, RateLimited) for a in answers) == 50 - EMAIL_FAILURES


async def test_attempts_that_were_not_wrong_guesses_are_given_back() -> None:
    throttle = LoginThrottle()
    for _ in range(ADDRESS_FAILURES + 5):  # successes and malformed requests from one address
        await throttle.succeeded(await throttle.attempt("a@x.test", "10.0.0.1"))
        await allowed(throttle, "b@x.test", "10.0.0.1")
    await fail(throttle, "a@x.test", "10.0.0.1", EMAIL_FAILURES)  # failures still count in full
    with pytest.raises(RateLimited, match="email"):
        await throttle.attempt("a@x.test", "10.0.0.1")
    throttled = LoginThrottle(email_failures=1, address_failures=2)
    await fail(throttled, "c@x.test", "10.0.0.1", 1)
    with pytest.raises(RateLimited):  # a refused attempt is not counted: the address is not charged
        await throttled.attempt("c@x.test", "10.0.0.1")
    await fail(throttled, "d@x.test", "10.0.0.1", 1)


@pytest.fixture
async def redis_states() -> list[RedisState]:
    """Two RedisState objects (two replicas' worth) on the suite's Redis, under a fresh prefix."""
    prefix = f"throttle-{uuid.uuid4().hex[:8]}:"
    states = [RedisState(live_redis_url(), prefix=prefix) for _ in range(2)]
    if not await states[0].ping():
        missing_service(f"Redis at {live_redis_url()}", ConnectionError("no answer to PING"))
    yield states
    for state in states:
        await state.close()


async def test_replicas_sharing_redis_allow_the_limit_once(redis_states: list[RedisState]) -> None:
    one, two = (LoginThrottle(state) for state in redis_states)
    away_from_a_window_boundary(5.0)
    for n in range(EMAIL_FAILURES):  # alternate replicas: each one alone saw only half
        await fail(one if n % 2 else two, "a@x.test", f"10.0.1.{n}", 1)
    for throttle in (one, two):
        with pytest.raises(RateLimited, match="email") as info:
            await throttle.attempt("a@x.test", "10.0.2.1")
        assert 1 <= info.value.retry_after <= WINDOW_S
    await allowed(one, "b@x.test", "10.0.2.1")  # other emails are not affected
    for n in range(ADDRESS_FAILURES):
        await fail(one if n % 2 else two, f"u{n}@x.test", "10.0.3.1", 1)
    with pytest.raises(RateLimited, match="address"):
        await two.attempt("fresh@x.test", "10.0.3.1")


async def test_replicas_reserve_concurrent_guesses_atomically(redis_states: list[RedisState]) -> None:
    """50 guesses at once, split over two replicas' throttles on one Redis: the shared counters admit
    the limit once, all replicas together; refunds of successes give their count back there too."""
    one, two = (LoginThrottle(state) for state in redis_states)
    away_from_a_window_boundary(5.0)
    attempts = [(one if n % 2 else two).attempt("a@x.test", f"10.0.4.{n}") for n in range(50)]
    answers = await asyncio.gather(*attempts, return_exceptions=True)
    admitted = [a for a in answers if isinstance(a, Attempt)]
    assert len(admitted) == EMAIL_FAILURES
    assert all(isinstance(a, Attempt | RateLimited) for a in answers)
    assert all(a.shared for a in admitted)
    for n in range(ADDRESS_FAILURES + 5):  # successes on either replica never use the address up
        throttle = one if n % 2 else two
        await throttle.succeeded(await throttle.attempt(f"u{n}@x.test", "10.0.5.1"))
    await allowed(two, "fresh@x.test", "10.0.5.1")


async def test_redis_not_answering_falls_back_to_this_processs_counts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = RedisState(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.5)  # nothing listens there
    throttle = LoginThrottle(state)
    try:
        with caplog.at_level(logging.WARNING, logger="relay.control.throttle"):
            await fail(throttle, "a@x.test", "10.0.0.1", EMAIL_FAILURES)  # neither refused nor lifted
            with pytest.raises(RateLimited, match="email"):
                await throttle.attempt("a@x.test", "10.0.0.1")
    finally:
        await state.close()
    warnings = [r for r in caplog.records if "this process only" in r.getMessage()]
    assert len(warnings) == 1  # at most one a minute


async def test_attempts_without_an_email_count_per_address_only() -> None:
    """The dashboard's admin-token sign-in: no shared name to use up, so guesses from one address never
    lock out another; the guessing address still runs out."""
    throttle = LoginThrottle()
    await fail(throttle, None, "10.0.6.1", ADDRESS_FAILURES)
    with pytest.raises(RateLimited, match="address"):
        await throttle.attempt(None, "10.0.6.1")
    await allowed(throttle, None, "10.0.6.2")
    await allowed(throttle, "(admin token)", "10.0.6.2")  # nothing was counted under any email
