"""The catalog page's "Batches" cell (SPEC §16, §17): a policy's batch block in one line."""

from __future__ import annotations

from typing import Any

import pytest

from relay.control.dashboard.admin_pages import batch_summary, cache_summary
from relay.domain.batch_policy import DEFAULT_BATCH_POLICY, BatchPolicy


@pytest.mark.parametrize(
    ("block", "shown"),
    [
        (None, "fail"),
        (DEFAULT_BATCH_POLICY.model_dump(), "fail"),
        (
            BatchPolicy(pacing="wait", live_reserve=0.2, max_concurrency=8).model_dump(),
            "wait · live 20% · max 8",
        ),
        (BatchPolicy(pacing="wait").model_dump(), "wait"),
        (BatchPolicy(live_reserve=0.125).model_dump(), "fail · live 12.5%"),
        (BatchPolicy(live_reserve=0.07, translate=True).model_dump(), "fail · live 7% · translate"),
        (BatchPolicy(max_concurrency=1).model_dump(), "fail · max 1"),
    ],
)
def test_the_block_in_one_line(block: dict[str, Any] | None, shown: str) -> None:
    assert batch_summary(block) == shown


@pytest.mark.parametrize(
    ("block", "shown"),
    [
        (None, "off"),
        ({"ttl": "1h", "scope": "project", "streams": True}, "1h · project"),
        ({"ttl": "30d", "scope": "credential", "streams": False}, "30d · credential · no streams"),
        ({"ttl": "10m", "scope": "policy", "streams": True}, "10m · policy"),
    ],
)
def test_the_cache_block_in_one_line(block: dict[str, Any] | None, shown: str) -> None:
    assert cache_summary(block) == shown
