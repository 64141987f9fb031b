"""SPEC §19 across replicas: two ``relay serve`` processes on one Postgres and one Redis share the
response cache — what one stores the other answers, a purge through either empties it for both, and
tenancy holds across them (another project misses on either replica)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, uniq
from tests.integration.cache.helpers import upstream_calls
from tests.integration.live.test_budgets import key_in_project


def cache_of(gateway: Gateway, key: str, payload: dict[str, Any], **headers: str) -> str:
    response = gateway.post("/v1/chat/completions", payload, headers={**gateway.auth(key), **headers})
    assert response.status_code == 200, response.text
    return response.headers.get("x-relay-cache", "")


def wait_cached_policy(gateway: Gateway, key: str, model: str) -> None:
    """Until this replica's snapshot has the policy's cache block (a no-store request says bypass)."""
    probe = {"model": model, "messages": [{"role": "user", "content": "probe"}]}
    deadline = time.monotonic() + 10
    while cache_of(gateway, key, probe, **{"cache-control": "no-store"}) != "bypass":
        assert time.monotonic() < deadline, "the replica never learned the policy's cache block"
        time.sleep(0.05)


def test_replicas_share_entries_and_purges(
    relay_replicas: tuple[Gateway, Gateway], fake: FakeUpstream
) -> None:
    first, second = relay_replicas
    s = first.scenario()
    first.patch("policies", s.policy, {"cache": {"ttl": "1h"}})
    other = first.create("projects", {"name": uniq("prj"), "team": "live-team"})
    _, stranger = key_in_project(first, other["name"], s.policy)
    for gateway in relay_replicas:
        gateway.wait_until_known(stranger)
        wait_cached_policy(gateway, s.key, s.model)
    payload = {"model": s.model, "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    called = upstream_calls(fake, s.model)

    assert cache_of(first, s.key, payload) == "miss"
    assert cache_of(second, s.key, payload) == "hit"  # stored by the first replica
    assert cache_of(second, stranger, payload) == "miss"  # another project, on either replica
    assert cache_of(first, stranger, payload) == "hit"
    assert upstream_calls(fake, s.model) - called == 2

    purged = second.relay.api("DELETE", f"/api/policies/{s.policy}/cache")
    assert purged.status_code == 200 and purged.json()["purged"] == 2
    assert cache_of(first, s.key, payload) == "miss"
    assert cache_of(second, stranger, payload) == "miss"
