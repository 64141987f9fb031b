"""Events for usage tests: complete, valid, with every field overridable."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from relay.domain.ids import mint_id
from relay.usage.event import UsageEvent

BASE_TS = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
_counter = itertools.count()


def make_event(**overrides: Any) -> UsageEvent:
    """A successful live event; ``minutes`` shifts ``ts`` from ``BASE_TS``."""
    n = next(_counter)
    minutes = overrides.pop("minutes", 0)
    fields: dict[str, Any] = {
        "id": mint_id("ue"),
        "ts": BASE_TS + timedelta(minutes=minutes),
        "request_id": f"req-{n}-{mint_id('r')}",
        "source": "live",
        "status": 200,
        "inbound_shape": "openai",
        "latency_ms": 100,
        "policy_id": "pol_a",
        "project_id": "prj_a",
        "team_id": "tm_a",
        "principal_kind": "serviceaccount",
        "principal_id": "sa_a",
        "credential_kind": "key",
        "credential_id": "key_a",
        "model": "gpt-test",
        "upstream_model": "gpt-test-2026",
        "host": "openai",
        "adapter": "openai",
        "host_key_id": "hk_a",
        "attempts": 1,
        "input_tokens": 10,
        "output_tokens": 5,
        "cost_nanos": 1000,
        "relay_key_hash": "ab" * 32,
    }
    fields.update(overrides)
    fields.setdefault("requested_model", fields["model"])  # no fallback: the model asked for answered
    return UsageEvent(**fields)


def batch_event(batch_id: str, idx: int, **overrides: Any) -> UsageEvent:
    return make_event(source="batch", batch_id=batch_id, batch_idx=idx, **overrides)
