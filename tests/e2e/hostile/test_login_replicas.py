"""Login throttling holds across replicas: two ``relay serve`` processes sharing Postgres and Redis
allow the per-email and per-address failure limits once between them, not once each (SPEC §3.2 login,
hardened; issue 13 item 4). Without Redis each process counts alone (``test_login_throttle``)."""

from __future__ import annotations

import uuid

import httpx

from relay.control.services.throttle import ADDRESS_FAILURES, EMAIL_FAILURES, WINDOW_S
from tests.e2e.hostile.guesses import fresh_loopback_address, guesses_at_once
from tests.e2e.hostile.test_login_throttle import away_from_a_window_boundary
from tests.e2e.hostile.test_reproducers import assert_json_error, make_user
from tests.fixtures.live import Gateway


def login(gw: Gateway, email: str, password: str) -> httpx.Response:
    url = f"{gw.relay.control_url}/api/auth/login"
    return httpx.post(url, json={"email": email, "password": password}, timeout=30)


def test_the_limits_hold_across_both_replicas(relay_replicas: tuple[Gateway, Gateway]) -> None:
    first, second = relay_replicas
    user, password = make_user(first)
    other, other_password = make_user(first)
    away_from_a_window_boundary()
    # Per email: alternating replicas, so each one alone saw only half the limit.
    for n in range(EMAIL_FAILURES):
        assert login(relay_replicas[n % 2], user["email"], "nope").status_code == 401
    for gw in (first, second):
        throttled = login(gw, user["email"], password)  # even the right password waits now
        assert_json_error(throttled, 429, "too many failed logins for this email")
        assert 1 <= int(throttled.headers["retry-after"]) <= WINDOW_S
    assert login(second, other["email"], other_password).status_code == 200  # only that email
    # Per address: every failure so far came from this test's address (127.0.0.1); unknown emails now.
    for n in range(ADDRESS_FAILURES - EMAIL_FAILURES):
        answer = login(relay_replicas[n % 2], f"nobody-{uuid.uuid4().hex[:8]}@example.test", "nope")
        assert answer.status_code == 401, (n, answer.text)
    for gw in (first, second):
        throttled = login(gw, other["email"], other_password)
        assert_json_error(throttled, 429, "too many failed logins for this address")
        assert 1 <= int(throttled.headers["retry-after"]) <= WINDOW_S


def test_concurrent_guesses_over_both_replicas_are_verified_at_most_the_limit(
    relay_replicas: tuple[Gateway, Gateway],
) -> None:
    """50 guesses at once for one email, alternating replicas: each replica reserves the attempt in the
    shared counters before hashing, so the two together verify the limit's worth (401), no more."""
    user, password = make_user(relay_replicas[0])
    away_from_a_window_boundary()
    urls = [gw.relay.control_url for gw in relay_replicas]
    answers = guesses_at_once(urls, user["email"], 50, fresh_loopback_address())
    assert answers == {401: EMAIL_FAILURES, 429: 50 - EMAIL_FAILURES}, answers
    for gw in relay_replicas:
        assert_json_error(login(gw, user["email"], password), 429, "too many failed logins for this email")
