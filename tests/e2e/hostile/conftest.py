"""A hostile-input gateway: one real ``relay serve`` per backend for a whole module, with the module
catalog of ``tests.fixtures.live`` and short protocol timeouts (so the 408 tests take seconds), a small
control-plane body limit (so the 413 tests send little) and an https ``RELAY_PUBLIC_URL`` (Secure
cookies)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, Reaper, start_gateway

HOSTILE_ENV = {
    "RELAY_HEADER_TIMEOUT_S": "2",
    "RELAY_BODY_READ_TIMEOUT_S": "2",
    "RELAY_CONTROL_MAX_REQUEST_BYTES": str(256 * 1024),
    "RELAY_PUBLIC_URL": "https://relay.example.test",
}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def hostile(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    workdir: Path = tmp_path_factory.mktemp(f"hostile-{request.param}")
    yield from start_gateway(request.param, workdir, fake_upstream, live_reaper, HOSTILE_ENV)


@pytest.fixture(scope="module")
def hostile_sqlite(
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[Gateway]:
    """One gateway on SQLite, for the fuzz run (its findings do not depend on the backend)."""
    workdir = tmp_path_factory.mktemp("hostile-fuzz")
    yield from start_gateway("sqlite", workdir, fake_upstream, live_reaper, HOSTILE_ENV)
