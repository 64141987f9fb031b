"""Anthropic Message Batches (SPEC §15) over HTTP: real ``relay serve`` processes and the fake upstream.

``mb_gateway`` (package scope: one relay per backend for every module here) is the live suite's
gateway with small batch limits, so the 413 and the item-count refusal are cheap to reach.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, start_gateway

MAX_ITEMS = 40
MAX_BYTES = 200_000


#: The message-batch gateways' settings: small batch limits, a quick heartbeat and expiry sweep (tests
#: expire batches by moving ``expires_at`` back).
MB_ENV = {
    "RELAY_BATCH_HEARTBEAT_S": "1",
    "RELAY_BATCH_EXPIRY_SWEEP_S": "0.5",
    "RELAY_BATCH_MAX_ITEMS": str(MAX_ITEMS),
    "RELAY_BATCH_MAX_BYTES": str(MAX_BYTES),
}


@pytest.fixture(scope="package", params=["sqlite", "postgres"])
def mb_gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir = tmp_path_factory.mktemp(f"mb-{request.param}")
    yield from start_gateway(request.param, workdir, fake_upstream, live_reaper, MB_ENV)
