"""Decides, per request, how long to wait and whether to fail instead of answering.

Three levels, highest first: the per-request override (``x-fake-*`` headers, which win over the body's
``"fake"`` object), the upstream key (runtime ``key_rules`` first, then the ``fail-…`` naming
convention), and the global config. The *outcome* (status / disconnect / retry-after) comes as a unit
from the highest level that sets a status or ``disconnect``; so ``"fake": {"status": 200}`` cancels a
failing key. Latency is resolved per field in the same order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from .config import FakeConfig, KeyRule
from .errors import BadRequest

DEFAULT_429_RETRY_AFTER = 1.0

HEADER_KNOBS: dict[bytes, str] = {
    b"x-fake-status": "status",
    b"x-fake-retry-after": "retry_after",
    b"x-fake-latency-ms": "latency_ms",
    b"x-fake-chunk-delay-ms": "chunk_delay_ms",
    b"x-fake-disconnect": "disconnect",
    b"x-fake-fail-after-chunks": "fail_after_chunks",
}
_INT_KNOBS = {"status", "fail_after_chunks"}
_NUMBER_KNOBS = {"retry_after", "latency_ms", "chunk_delay_ms"}


@dataclass(slots=True)
class Plan:
    latency_s: float = 0.0
    chunk_delay_s: float = 0.0
    status: int | None = None
    retry_after: float | None = None
    disconnect: bool = False
    fail_after_chunks: int | None = None


@lru_cache(maxsize=4096)
def rule_from_key_name(key: str) -> KeyRule | None:
    """``fail-<status>[-ra<seconds>]-…`` fails with that status; ``fail-conn-…`` drops the connection."""
    parts = key.split("-")
    if len(parts) < 2 or parts[0] != "fail":
        return None
    if parts[1] == "conn":
        return KeyRule(pattern=key, disconnect=True)
    if not parts[1].isdigit() or not 100 <= int(parts[1]) <= 599:
        return None
    retry_after = None
    if len(parts) > 2 and parts[2].startswith("ra"):
        try:
            retry_after = float(parts[2][2:])
        except ValueError:
            retry_after = None
        if retry_after is not None and not 0 <= retry_after < 1e9:
            retry_after = None  # also rejects nan and inf
    return KeyRule(pattern=key, status=int(parts[1]), retry_after=retry_after)


def _check(name: str, value: Any) -> Any:
    if name == "disconnect":
        if not isinstance(value, bool):
            raise BadRequest("fake.disconnect must be a boolean")
    elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1e9:
        raise BadRequest(f"fake.{name} must be a non-negative number")
    elif name in _INT_KNOBS and not isinstance(value, int):
        raise BadRequest(f"fake.{name} must be an integer")
    if name == "status" and not 100 <= value <= 599:
        raise BadRequest("fake.status must be an HTTP status code")
    return value


def body_overrides(fake: Any) -> dict[str, Any]:
    """Validates the body's ``"fake"`` object (typos are 400s, not silently ignored knobs)."""
    if not isinstance(fake, dict):
        raise BadRequest("'fake' must be an object")
    known = set(HEADER_KNOBS.values())
    unknown = set(fake) - known
    if unknown:
        raise BadRequest(f"unknown fake knob(s): {', '.join(sorted(unknown))}")
    return {name: _check(name, value) for name, value in fake.items() if value is not None}


def header_overrides(headers: dict[bytes, bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for header, raw in headers.items():
        name = HEADER_KNOBS.get(header)
        if name is None:
            continue
        text = raw.decode("latin-1").strip()
        if name == "disconnect":
            out[name] = text.lower() in ("1", "true", "yes")
            continue
        try:
            value: float | int = int(text) if name in _INT_KNOBS else float(text)
        except ValueError:
            raise BadRequest(f"header {header.decode()} must be a number")
        out[name] = _check(name, value)
    return out


def key_rule(config: FakeConfig, key: str | None) -> KeyRule | None:
    if not key:
        return None
    for rule in config.key_rules:
        if fnmatchcase(key, rule.pattern):
            return rule
    if key.startswith("fail-"):
        return rule_from_key_name(key)
    return None


def plan_for(config: FakeConfig, key: str | None, overrides: dict[str, Any]) -> Plan:
    rule = key_rule(config, key)
    plan = Plan(chunk_delay_s=overrides.get("chunk_delay_ms", config.chunk_delay_ms) / 1000.0)

    if "latency_ms" in overrides:
        plan.latency_s = overrides["latency_ms"] / 1000.0
    elif rule is not None and rule.latency_ms is not None:
        plan.latency_s = rule.latency_ms / 1000.0
    else:
        latency = config.latency_ms
        if config.jitter_ms:
            latency += random.uniform(0.0, config.jitter_ms)
        plan.latency_s = latency / 1000.0

    retry_after = overrides.get("retry_after")
    if "status" in overrides or overrides.get("disconnect"):
        plan.status = overrides.get("status")
        plan.disconnect = bool(overrides.get("disconnect"))
    elif rule is not None and (rule.status is not None or rule.disconnect):
        plan.status, plan.disconnect = rule.status, rule.disconnect
        if retry_after is None:
            retry_after = rule.retry_after
    if plan.status is not None and plan.status < 400:
        plan.status = None  # an explicit success status cancels a lower-level failure
    if plan.status is not None:
        if retry_after is None and plan.status == 429:
            retry_after = DEFAULT_429_RETRY_AFTER
        plan.retry_after = retry_after
    plan.fail_after_chunks = overrides.get("fail_after_chunks")
    return plan
