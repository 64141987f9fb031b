"""SPEC §19 over HTTP: Cache-Control and ``streams: false`` bypass, tenancy (project, policy and
credential scopes), TTL expiry, purge, the usage events of hits and misses, the metric."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, metric_value, uniq
from tests.integration.cache.helpers import cached_scenario, upstream_calls, words
from tests.integration.live.test_budgets import key_in_project

PATH = "/v1/chat/completions"


def body(model: str, prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], **extra}


def call(gateway: Gateway, key: str, payload: dict[str, Any], **headers: str) -> httpx.Response:
    response = gateway.post(PATH, payload, headers={**gateway.auth(key), **headers})
    assert response.status_code == 200, response.text
    return response


def result(gateway: Gateway, key: str, payload: dict[str, Any], **headers: str) -> str:
    return call(gateway, key, payload, **headers).headers["x-relay-cache"]


def streamed(gateway: Gateway, key: str, payload: dict[str, Any]) -> str:
    answer = gateway.stream(PATH, {**payload, "stream": True}, key=key)
    assert answer.status == 200 and answer.data[-1] == "[DONE]"
    return answer.headers["x-relay-cache"]


def test_no_store_skips_lookup_and_store_no_cache_skips_only_the_lookup(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = cached_scenario(gateway)
    payload = body(s.model, words())
    assert result(gateway, s.key, payload, **{"cache-control": "no-store"}) == "bypass"
    assert result(gateway, s.key, payload) == "miss"  # nothing was kept by no-store
    assert result(gateway, s.key, payload, **{"cache-control": "no-store, max-age=0"}) == "bypass"
    assert upstream_calls(fake, s.model) == 3

    fresh = body(s.model, words())
    assert result(gateway, s.key, fresh, **{"cache-control": "No-Cache"}) == "bypass"
    assert result(gateway, s.key, fresh) == "hit"  # no-cache stored what it fetched
    assert result(gateway, s.key, fresh, **{"cache-control": "no-cache"}) == "bypass"  # not read
    assert upstream_calls(fake, s.model) == 5


def test_streams_false_makes_streamed_requests_bypass(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway, cache={"ttl": "1h", "streams": False})
    payload = body(s.model, words())
    assert streamed(gateway, s.key, payload) == "bypass"
    assert result(gateway, s.key, payload) == "miss"  # the stream was not kept
    assert result(gateway, s.key, payload) == "hit"
    assert streamed(gateway, s.key, payload) == "bypass"  # nor served to a stream
    assert upstream_calls(fake, s.model) == 3


def test_project_scope_shares_within_a_project_never_across(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway)
    _, same_project = gateway.mint_key(s.policy)  # the module's account: the same project
    other = gateway.create("projects", {"name": uniq("prj"), "team": "live-team"})
    _, other_project = key_in_project(gateway, other["name"], s.policy)
    payload = body(s.model, words())
    assert result(gateway, s.key, payload) == "miss"
    assert result(gateway, same_project, payload) == "hit"
    assert result(gateway, other_project, payload) == "miss"  # an identical body, another project
    assert result(gateway, other_project, payload) == "hit"  # its own entry now
    assert upstream_calls(fake, s.model) == 2


def test_credential_scope_never_shares_between_keys(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway, cache={"ttl": "1h", "scope": "credential"})
    _, second = gateway.mint_key(s.policy)
    payload = body(s.model, words())
    assert [result(gateway, k, payload) for k in (s.key, second, s.key, second)] == [
        "miss",
        "miss",
        "hit",
        "hit",
    ]
    assert upstream_calls(fake, s.model) == 2


def test_policy_scope_shares_across_projects_of_the_policy_only(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway, cache={"ttl": "1h", "scope": "policy"})
    other = gateway.create("projects", {"name": uniq("prj"), "team": "live-team"})
    _, other_project = key_in_project(gateway, other["name"], s.policy)
    payload = body(s.model, words())
    assert result(gateway, s.key, payload) == "miss"
    assert result(gateway, other_project, payload) == "hit"
    # Another policy with the same model and the same body has its own entries.
    twin = gateway.create(
        "policies", {"name": uniq("p"), "models": ["*"], "cache": {"ttl": "1h", "scope": "policy"}}
    )
    gateway.patch("policies", twin["name"], {"host_keys": [k["name"] for k in s.host_keys]})
    _, twin_key = gateway.mint_key(twin["name"])
    assert result(gateway, twin_key, payload) == "miss"
    assert upstream_calls(fake, s.model) == 2


def test_an_entry_expires_after_its_ttl(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway, cache={"ttl": "1s"})
    payload = body(s.model, words())
    assert result(gateway, s.key, payload) == "miss"
    deadline = time.monotonic() + 30  # a bound that fails a cache that never expires, not a speed check
    seen = []
    while not seen or seen[-1] != "miss":
        assert time.monotonic() < deadline, f"the 1 s entry never expired: {seen}"
        time.sleep(0.2)
        seen.append(result(gateway, s.key, payload))
    assert set(seen) <= {"hit", "miss"}


def test_purge_empties_the_policys_entries_only(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway)
    other = cached_scenario(gateway)
    mine, theirs = body(s.model, words()), body(other.model, words())
    assert (result(gateway, s.key, mine), result(gateway, other.key, theirs)) == ("miss", "miss")
    assert (result(gateway, s.key, mine), result(gateway, other.key, theirs)) == ("hit", "hit")

    purged = gateway.relay.api("DELETE", f"/api/policies/{s.policy}/cache")
    assert purged.status_code == 200, purged.text
    assert purged.json() == {"policy": s.policy, "purged": 1}
    assert result(gateway, s.key, mine) == "miss"
    assert result(gateway, other.key, theirs) == "hit"
    assert gateway.relay.api("DELETE", f"/api/policies/{uniq('nope')}/cache").status_code == 404
    unauthenticated = httpx.delete(f"{gateway.relay.control_url}/api/policies/{s.policy}/cache", timeout=10)
    assert unauthenticated.status_code == 401


def events_of(gateway: Gateway, policy_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        response = gateway.relay.api("GET", f"/api/usage/events?policy={policy_id}&limit=100")
        assert response.status_code == 200, response.text
        events = list(response.json()["events"])
        if len(events) >= count:
            return list(reversed(events))  # oldest first
        assert time.monotonic() < deadline, f"{len(events)} of {count} usage events"
        time.sleep(0.1)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_hits_usage_event_is_free_with_the_stored_tokens_and_no_key(gateway: Gateway, stream: bool) -> None:
    s = cached_scenario(gateway)
    payload = body(s.model, words())
    before = gateway.metrics()
    first = streamed(gateway, s.key, payload) if stream else result(gateway, s.key, payload)
    second = streamed(gateway, s.key, payload) if stream else result(gateway, s.key, payload)
    assert (first, second) == ("miss", "hit")
    miss, hit = events_of(gateway, gateway.object_id("policies", s.policy), 2)
    assert miss["cache_hit"] is False and miss["attempts"] == 1 and miss["host_key_id"] is not None
    assert miss["cost_nanos"] > 0
    assert hit["cache_hit"] is True
    assert (hit["status"], hit["attempts"], hit["host_key_id"], hit["cost_nanos"]) == (200, 0, None, 0)
    assert hit["error_kind"] is None and hit["streamed"] is stream
    assert (hit["input_tokens"], hit["output_tokens"]) == (miss["input_tokens"], miss["output_tokens"])
    assert hit["input_tokens"] > 0 and hit["output_tokens"] > 0
    assert hit["model"] == miss["model"] == s.model
    after = gateway.metrics()
    for outcome in ("hit", "miss"):
        counted = metric_value(after, "relay_cache_requests_total", result=outcome)
        assert counted - metric_value(before, "relay_cache_requests_total", result=outcome) == 1
