"""Helpers of the guardrail tests: a scenario whose policy has guardrails, usage events of a policy."""

from __future__ import annotations

import time
from typing import Any

from tests.fixtures.live import Gateway, Scenario, uniq


def guarded_scenario(gateway: Gateway, *guardrails: dict[str, Any], adapter: str = "openai") -> Scenario:
    """A fresh scenario whose policy names ``guardrails`` (created here with random names, in order)."""
    scenario = gateway.scenario(adapter=adapter)
    names = [gateway.create("guardrails", {"name": uniq("gr"), **g})["name"] for g in guardrails]
    gateway.patch("policies", scenario.policy, {"guardrails": names})
    return scenario


def events_of(gateway: Gateway, policy: str, count: int) -> list[dict[str, Any]]:
    """The policy's usage events, oldest first, once there are ``count``."""
    policy_id = gateway.object_id("policies", policy)
    deadline = time.monotonic() + 15
    while True:
        response = gateway.relay.api("GET", f"/api/usage/events?policy={policy_id}&limit=100")
        assert response.status_code == 200, response.text
        events = list(response.json()["events"])
        if len(events) >= count:
            return list(reversed(events))
        assert time.monotonic() < deadline, f"{len(events)} of {count} usage events"
        time.sleep(0.1)
