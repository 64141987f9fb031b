"""Completion webhooks over HTTP (SPEC §10.10): real ``relay serve`` processes, the fake upstream, and
a real receiver on loopback.

``hooked`` (module scope, one per backend) is one relay with the live catalog (``tests.fixtures.live``),
the live gateways' quick expiry sweep (``GATEWAY_ENV``: tests expire §14/§15 batches by moving
``expires_at`` back), and a miniature retry schedule (``RELAY_WEBHOOK_RETRY_SCALE``) and attempt
timeout, so retries and timeouts happen within a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import GATEWAY_ENV, Gateway, Reaper, start_gateway

# 5 s, 30 s, 2 min … become 5 ms, 30 ms, 120 ms …; the 24 h window 86 s. Attempts time out after 3 s
# (short enough for the hanging-receiver test, long enough for a loaded machine's receiver to answer).
WEBHOOK_ENV = {"RELAY_WEBHOOK_RETRY_SCALE": "0.001", "RELAY_WEBHOOK_TIMEOUT_S": "3"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hooked(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir: Path = tmp_path_factory.mktemp(f"webhooks-{request.param}")
    env = {**GATEWAY_ENV, **WEBHOOK_ENV}
    yield from start_gateway(request.param, workdir, fake_upstream, live_reaper, env)
