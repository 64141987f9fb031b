"""One relay per backend for the package, polling offloaded batches every 0.2 s (SPEC §22)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import GATEWAY_ENV, Gateway, Reaper, start_gateway
from tests.integration.offload.helpers import OFFLOAD_ENV


@pytest.fixture(scope="package", params=["sqlite", "postgres"], name="gw")
def offload_gateway(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir: Path = tmp_path_factory.mktemp(f"offload-{request.param}")
    yield from start_gateway(
        request.param, workdir, fake_upstream, live_reaper, {**GATEWAY_ENV, **OFFLOAD_ENV}
    )
