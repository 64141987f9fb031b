"""Helpers of the cache tests: a scenario whose policy caches, the SDK clients, what the fake saw."""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import openai

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Scenario


def cached_scenario(
    gateway: Gateway,
    *,
    adapter: str = "openai",
    cache: dict[str, Any] | None = None,
    rules: list[dict[str, Any]] | None = None,
) -> Scenario:
    """A fresh scenario (host, model, policy, key) whose policy has ``cache`` (default ``{ttl: 1h}``)."""
    scenario = gateway.scenario(adapter=adapter, rules=rules)
    gateway.patch("policies", scenario.policy, {"cache": cache or {"ttl": "1h"}})
    return scenario


def oai(gateway: Gateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/openai/v1", api_key=key, max_retries=0, timeout=30)


def ant(gateway: Gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{gateway.url}/anthropic", api_key=key, max_retries=0, timeout=30)


def upstream_calls(fake: FakeUpstream, upstream_model: str) -> int:
    """How many requests for ``upstream_model`` (a scenario's model name) reached the fake."""
    return sum(1 for r in fake.requests() if (r.get("body") or {}).get("model") == upstream_model)


def words() -> str:
    """A prompt no other test sends (a fresh cache key)."""
    return f"tell me about {uuid.uuid4().hex[:10]}"
