"""SPEC §19 "Limits and usage" over HTTP: a hit is admitted and counted by ``requests`` rules only —
token rules and budgets neither refuse nor charge it — whole and streamed; a batch item uses its
policy's cache like a live request, with the same answer and a ``cache_hit`` usage event."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.integration.batch_api.helpers import item_events, results, submit, wait_finished
from tests.integration.cache.helpers import cached_scenario, upstream_calls, words

PATH = "/v1/chat/completions"
SPENT_BY_ONE_CALL = [
    {"meter": "tokens", "limit": 1, "window": "1d"},
    {"meter": "cost_usd", "limit": 0.000000001, "window": "1d"},
]


def body(model: str, prompt: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}]}


def ask(gateway: Gateway, key: str, payload: dict[str, Any], stream: bool) -> tuple[int, str, str]:
    """(status, X-Relay-Cache, error code) of one request."""
    if stream:
        answer = gateway.stream(PATH, {**payload, "stream": True}, key=key)
        return answer.status, answer.headers.get("x-relay-cache", ""), ""
    response = gateway.post(PATH, payload, key=key)
    code = response.json()["error"]["code"] if response.status_code != 200 else ""
    return response.status_code, response.headers.get("x-relay-cache", ""), code


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_token_rules_and_budgets_neither_refuse_nor_charge_a_hit(
    gateway: Gateway, fake: FakeUpstream, stream: bool
) -> None:
    s = cached_scenario(gateway, rules=SPENT_BY_ONE_CALL)
    cached = body(s.model, words())
    assert ask(gateway, s.key, cached, stream)[:2] == (200, "miss")  # spends the tokens and the budget
    refused = gateway.post(PATH, body(s.model, words()), key=s.key)  # a miss now meets them
    assert refused.status_code == 429, refused.text
    for _ in range(3):
        assert ask(gateway, s.key, cached, stream)[:2] == (200, "hit")
    spend = gateway.relay.api("GET", f"/api/policies/{s.policy}/spend").json()
    [budget] = spend["rules"]
    [entry] = budget["entries"]
    assert entry["spent_usd"] > 0
    assert upstream_calls(fake, s.model) == 1
    # The hits charged nothing: the spend is the one miss's.
    again = gateway.relay.api("GET", f"/api/policies/{s.policy}/spend").json()["rules"][0]["entries"][0]
    assert again["spent_usd"] == entry["spent_usd"]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_requests_rule_counts_and_refuses_hits(gateway: Gateway, fake: FakeUpstream, stream: bool) -> None:
    s = cached_scenario(gateway, rules=[{"meter": "requests", "limit": 3, "window": "1d"}])
    cached = body(s.model, words())
    assert ask(gateway, s.key, cached, stream)[:2] == (200, "miss")
    assert ask(gateway, s.key, cached, stream)[:2] == (200, "hit")
    assert ask(gateway, s.key, cached, stream)[:2] == (200, "hit")
    status, _header, _code = ask(gateway, s.key, cached, stream)
    assert status == 429  # the fourth request, a would-be hit, is over the requests rule
    assert upstream_calls(fake, s.model) == 1


def test_a_concurrency_rule_admits_hits_and_gives_the_slot_back(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway, rules=[{"meter": "concurrency", "limit": 1}])
    cached = body(s.model, words())
    assert ask(gateway, s.key, cached, False)[:2] == (200, "miss")
    for _ in range(5):  # each hit takes the one slot and releases it
        assert ask(gateway, s.key, cached, False)[:2] == (200, "hit")


def test_batch_items_use_their_policys_cache_like_live_requests(gateway: Gateway, fake: FakeUpstream) -> None:
    s = cached_scenario(gateway)
    live_first, batch_first = body(s.model, words()), body(s.model, words())
    live = gateway.post(PATH, live_first, key=s.key)
    assert live.headers["x-relay-cache"] == "miss"
    # Item 0: the live request's entry (a hit); item 1: a miss; item 2: item 1 again — a hit or a miss,
    # as two identical requests in flight at once may each miss (no single-flight).
    batch_id = submit(gateway, "openai", [live_first, batch_first, batch_first], key=s.key)
    wait_finished(gateway, batch_id, key=s.key)
    events = item_events(gateway, batch_id, 3)
    assert events[0]["cache_hit"] is True
    assert (events[0]["attempts"], events[0]["cost_nanos"], events[0]["host_key_id"]) == (0, 0, None)
    assert events[1]["cache_hit"] is False and events[1]["attempts"] == 1
    answers = {r["idx"]: r for r in results(gateway, batch_id, key=s.key)}
    assert all(answers[i]["state"] == "completed" for i in range(3)), answers
    assert answers[0]["response"]["choices"] == live.json()["choices"]

    # The item's answer is now the live request's: the same entry, the same shape.
    again = gateway.post(PATH, batch_first, key=s.key)
    assert again.headers["x-relay-cache"] == "hit"
    assert again.json()["choices"] == answers[1]["response"]["choices"]
