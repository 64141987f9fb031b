"""SPEC §5 and §6 across replicas: two ``relay serve`` processes on one Postgres and one Redis share
rate-limit counters, concurrency leases, breakers and the round-robin counter, so together they admit
the limit once — not once per replica."""

from __future__ import annotations

import asyncio
import itertools

import httpx

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Scenario, metric_value
from tests.integration.live.helpers import keys_called


def body(s: Scenario, **extra: object) -> dict[str, object]:
    return {"model": s.model, "messages": [{"role": "user", "content": "hello there"}], **extra}


async def post_all(
    relay_replicas: tuple[Gateway, Gateway], s: Scenario, n: int, **extra: object
) -> list[int]:
    """``n`` requests at once, alternating between the two replicas; their statuses."""
    clients = [httpx.AsyncClient(base_url=g.url, headers=g.auth(s.key), timeout=30) for g in relay_replicas]
    try:
        calls = [
            client.post("/v1/chat/completions", json=body(s, **extra))
            for client, _ in zip(itertools.cycle(clients), range(n), strict=False)
        ]
        return [r.status_code for r in await asyncio.gather(*calls)]
    finally:
        for client in clients:
            await client.aclose()


def scenario_on_both(relay_replicas: tuple[Gateway, Gateway], *args: object, **kwargs: object) -> Scenario:
    first, second = relay_replicas
    s = first.scenario(*args, **kwargs)  # type: ignore[arg-type]
    second.wait_until_known(s.key)
    return s


async def test_requests_limit_is_shared_by_the_replicas(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    s = scenario_on_both(relay_replicas, rules=[{"meter": "requests", "limit": 10, "window": "1d"}])
    statuses = await post_all(relay_replicas, s, 30)
    assert statuses.count(200) == 10, statuses  # not 2 × 10
    assert statuses.count(429) == 20, statuses
    assert fake.stats()["requests"] == 10
    # and each replica, on its own, now refuses
    for gateway in relay_replicas:
        assert gateway.chat(s.model, key=s.key).status_code == 429


async def test_concurrency_limit_is_shared_by_the_replicas(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    s = scenario_on_both(relay_replicas, rules=[{"meter": "concurrency", "limit": 2}])
    statuses = await post_all(relay_replicas, s, 4, fake={"latency_ms": 1500})
    assert sorted(statuses) == [200, 200, 429, 429], statuses
    assert fake.stats()["requests"] == 2


def test_breakers_are_shared_by_the_replicas(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    first, second = relay_replicas
    for gateway in relay_replicas:  # both read breakers from their mirrors, kept by Redis notifications
        assert metric_value(gateway.metrics(), "relay_breaker_mirror") == 1.0
    s = scenario_on_both(relay_replicas, ["fail-429-ra30", "ok"])
    bad, good = s.value(0), s.value(1)
    assert first.chat(s.model, key=s.key).status_code == 200  # trips the first key for 30 s
    assert second.chat(s.model, key=s.key).status_code == 200  # the other replica skips it
    assert keys_called(fake) == [bad, good, good]


def test_a_tuned_breaker_counts_the_failures_of_both_replicas_together(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    """SPEC §6 tuning on two ``relay serve`` processes sharing Redis: with ``threshold: 2`` one 5xx on
    each replica opens the key for both (not one per replica, and not on the first failure)."""
    first, second = relay_replicas
    s = first.scenario(["fail-500", "ok"])
    first.patch("hosts", s.host, {"breaker": {"threshold": 2, "window_s": 60, "max_open_s": 60}})
    _, key = first.mint_key(s.policy)  # written after the tuning: a replica that knows it knows the tuning
    for gateway in relay_replicas:
        gateway.wait_until_known(key)
    bad, good = s.value(0), s.value(1)
    assert first.chat(s.model, key=key).status_code == 200  # failed over: one failure, the key stays
    assert second.chat(s.model, key=key).status_code == 200  # the second failure, on the other replica
    assert first.chat(s.model, key=key).status_code == 200  # open on both replicas now: skipped
    assert second.chat(s.model, key=key).status_code == 200
    assert keys_called(fake) == [bad, good, bad, good, good, good]


def test_round_robin_counter_is_shared_by_the_replicas(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    s = scenario_on_both(relay_replicas, ["a", "b"], key_selection="round_robin")
    for gateway in (*relay_replicas, *relay_replicas):
        assert gateway.chat(s.model, key=s.key).status_code == 200
    called = keys_called(fake)
    assert sorted(called[:2]) == sorted([s.value(0), s.value(1)])  # one counter: alternates
    assert called[2:] == called[:2]


async def test_budget_is_shared_by_the_replicas_and_overshoots_by_at_most_the_calls_in_flight(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    # SPEC §5: each call costs 8 000 nano-USD (2 + 3 tokens at $1 / $2 per million); $0.00008 = 10 calls.
    s = scenario_on_both(relay_replicas, rules=[{"meter": "cost_usd", "limit": "0.00008", "window": "30d"}])
    wave = 6  # calls in flight at once, three per replica
    statuses: list[int] = []
    while 429 not in statuses:
        statuses += await post_all(relay_replicas, s, wave)
    admitted = statuses.count(200)
    # Admitted while the committed spend is below the limit: at least the 10 it pays for, and at most
    # the calls that were in flight (one wave, less the one that crossed) when it ran out.
    assert 10 <= admitted <= 10 + wave - 1, statuses
    assert fake.stats()["requests"] == admitted
    spent = {}
    for gateway in relay_replicas:  # both replicas read the one shared counter
        [rule] = gateway.relay.api("GET", f"/api/policies/{s.policy}/spend").json()["rules"]
        spent[gateway.url] = rule["entries"][0]["spent_usd"]
        assert gateway.chat(s.model, key=s.key).json()["error"]["code"] == "budget_exceeded"
    assert set(spent.values()) == {admitted * 8000 / 1e9}
