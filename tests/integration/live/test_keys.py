"""SPEC §6 the host-key pool of live requests over HTTP: selection strategies, breakers and failover
on each backend's hot state. Failover's bound, every key failing, every breaker open and the statuses
returned as they are are tested in-process (``tests/unit/inference/test_live.py``).

The fake upstream records the upstream key and body of every request, so where a request went and
which keys were tried in which order is visible. Key values follow the fake's naming convention
(``fail-500-…`` always answers 500, …; see docs/fake-upstream.md). Breakers, counters and limits are
per host key or policy, so each test builds its own host, keys, model and policy (random names) and
nothing leaks between the tests sharing the package's process (one ``relay serve`` per backend:
SQLite with hot state in process memory; Postgres with hot state in Redis).
"""

from __future__ import annotations

import time

import httpx

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    Gateway,
)
from tests.integration.live.helpers import (
    assert_openai_error,
    chat,
    keys_called,
    ok,
)

# --- §6 selection -------------------------------------------------------------------------------------


def test_prioritized_uses_the_first_key(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["a", "b", "c"])
    for _ in range(3):
        ok(chat(gateway, s))
    assert keys_called(fake) == [s.value(0)] * 3


def test_round_robin_rotates_over_the_pool(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["a", "b", "c"], key_selection="round_robin")
    for _ in range(6):
        ok(chat(gateway, s))
    called = keys_called(fake)
    assert sorted(called[:3]) == sorted(s.value(i) for i in range(3))  # each key once per round
    assert called[3:] == called[:3]  # and the same order again


def test_least_recently_used_picks_the_oldest_key(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["a", "b", "c"], key_selection="least_recently_used")
    for _ in range(6):
        ok(chat(gateway, s))
    a, b, c = (s.value(i) for i in range(3))
    assert keys_called(fake) == [a, b, c, a, b, c]


# --- §6 breakers and failover ----------------------------------------------------------------------------


def test_auth_failure_fails_over_and_opens_until_the_key_is_edited(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = gateway.scenario(["fail-401", "ok"])
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))  # 401 from the first key: the next key answers
    assert keys_called(fake) == [bad, good]
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good, good]  # the 401 key is skipped, however long
    # Editing the key (same value: the version changes) re-arms it: it is tried again, and fails again.
    gateway.patch("host-keys", s.host_keys[0]["name"], {"value": bad})
    ok(chat(gateway, s))
    assert keys_called(fake)[4:] == [bad, good]
    ok(chat(gateway, s))
    assert keys_called(fake)[6:] == [good]
    # Disabling and re-enabling it does too.
    gateway.patch("host-keys", s.host_keys[0]["name"], {"enabled": False})
    gateway.patch("host-keys", s.host_keys[0]["name"], {"enabled": True})
    ok(chat(gateway, s))
    assert keys_called(fake)[7:] == [bad, good]


def test_short_429_fails_over_without_tripping(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-429", "ok"])  # 429 with Retry-After: 1
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, bad, good]  # tried first again every time


def test_long_429_opens_the_breaker(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-429-ra30", "ok"])  # 429 with Retry-After: 30
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good]


def test_5xx_opens_with_backoff_then_half_open(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "ok"])
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good]  # open for 1 s
    time.sleep(1.2)
    ok(chat(gateway, s))  # half-open: tried again (and fails again)
    assert keys_called(fake)[3:] == [bad, good]
    ok(chat(gateway, s))  # open again, now for 2 s
    assert keys_called(fake)[5:] == [good]


def test_connection_error_trips_and_fails_over(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-conn", "ok"])
    bad, good = s.value(0), s.value(1)
    ok(chat(gateway, s))
    recorded = fake.requests()
    assert [r["key"] for r in recorded] == [bad, good]
    assert recorded[0]["status"] is None  # the fake dropped the connection
    ok(chat(gateway, s))
    assert keys_called(fake) == [bad, good, good]


def test_failover_of_a_stream_before_its_first_byte(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "ok"])
    body = {"model": s.model, "messages": [{"role": "user", "content": "hello there"}], "stream": True}
    result = gateway.stream("/v1/chat/completions", body, key=s.key)
    assert result.status == 200
    assert result.events[-1].data == "[DONE]"
    assert keys_called(fake) == [s.value(0), s.value(1)]


def test_a_stream_that_breaks_after_its_first_byte_is_not_retried(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = gateway.scenario(["ok", "ok"])
    body = {
        "model": s.model,
        "messages": [{"role": "user", "content": "one two three four five"}],
        "stream": True,
        "fake": {"fail_after_chunks": 2},
    }
    try:
        result = gateway.stream("/v1/chat/completions", body, key=s.key)
        events = result.events
        assert result.status == 200
    except httpx.RemoteProtocolError:  # the caller may see the cut as an incomplete chunked body
        events = []
    assert all(e.data != "[DONE]" for e in events)
    assert keys_called(fake) == [s.value(0)]


def test_a_failed_request_gives_its_concurrency_slot_back(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500"], rules=[{"meter": "concurrency", "limit": 1}])
    assert_openai_error(chat(gateway, s), 502, "upstream_unavailable")
    # not 429: the slot of the failed request was released; the key's breaker is open now
    assert_openai_error(chat(gateway, s), 503, "no_healthy_keys")
