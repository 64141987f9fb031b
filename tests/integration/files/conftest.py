"""The Files API over HTTP (SPEC §14 Files): real ``relay serve`` processes on SQLite and Postgres, each
with both payload stores, reached with the official ``openai`` SDK and raw ``httpx``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Reaper, start_gateway
from tests.integration.files.helpers import FilesRelay

MAX_BYTES = 60 * 1024 * 1024  # RELAY_BATCH_MAX_BYTES of these relays: the 50 MB upload fits

COMBOS = [("sqlite", "files"), ("sqlite", "database"), ("postgres", "files"), ("postgres", "database")]


@pytest.fixture(scope="package", params=COMBOS, ids=[f"{b}-{s}" for b, s in COMBOS])
def files_relay(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake_upstream: FakeUpstream,
    live_reaper: Reaper,
) -> Iterator[FilesRelay]:
    backend, store = request.param
    workdir: Path = tmp_path_factory.mktemp(f"files-{backend}-{store}")
    payload_dir = workdir / "payloads"
    env = {
        "RELAY_BATCH_PAYLOAD_STORE": store,
        "RELAY_BATCH_PAYLOAD_DIR": str(payload_dir),
        "RELAY_BATCH_MAX_BYTES": str(MAX_BYTES),
        "RELAY_FILES_SWEEP_S": "1",
        "RELAY_BATCH_WORKERS": "0",
    }
    for gw in start_gateway(backend, workdir, fake_upstream, live_reaper, env):
        yield FilesRelay(gw, store, payload_dir, gw.relay.database_url)
