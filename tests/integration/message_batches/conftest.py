"""Anthropic Message Batches (SPEC §15) over HTTP: real ``relay serve`` processes and the fake upstream.

``mb_gateway`` (package scope: one relay per backend for every module here) is the live suite's
gateway with small batch limits, so the 413 and the item-count refusal are cheap to reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, backend_setup
from tests.fixtures.relay_server import RelayProcess

MAX_ITEMS = 40
MAX_BYTES = 200_000


def start_gateway(
    backend: str, workdir: Path, fake: FakeUpstream, reaper: Reaper, extra_env: dict[str, str]
) -> Iterator[Gateway]:
    database_url, redis_url, env = backend_setup(backend, workdir)
    env.update(
        {
            "RELAY_BATCH_HEARTBEAT_S": "1",
            "RELAY_BATCH_EXPIRY_SWEEP_S": "0.5",  # tests expire batches by moving expires_at back
            "RELAY_BATCH_MAX_ITEMS": str(MAX_ITEMS),
            "RELAY_BATCH_MAX_BYTES": str(MAX_BYTES),
            **extra_env,
        }
    )
    process = RelayProcess(workdir, database_url, env)
    try:
        process.start()
        gw = Gateway(process, fake, backend, redis_url)
        gw.apply_catalog()
        yield gw
    finally:
        reaper.stop([process], database_url if backend == "postgres" else None)


@pytest.fixture(scope="package", params=["sqlite", "postgres"])
def mb_gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir = tmp_path_factory.mktemp(f"mb-{request.param}")
    yield from start_gateway(request.param, workdir, fake_upstream, live_reaper, {})
