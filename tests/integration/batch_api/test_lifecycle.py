"""Batches across processes (SPEC §10.1, §10.4, §10.6): submit on a replica without workers, change the
catalog, then let a replica with workers run the items; the batch body limit is its own."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.databases import create_postgres_database, drop_postgres_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.fixtures.relay_server import RelayProcess
from tests.integration.batch_api.helpers import chat_item, results, status, submit, wait_events, wait_finished


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'relay.db'}"
        return
    url = create_postgres_database()
    try:
        yield url
    finally:
        drop_postgres_database(url)


def test_revoked_key_fails_items_and_limits_are_independent(
    database_url: str, tmp_path: Path, fake_upstream: FakeUpstream
) -> None:
    env = {
        "RELAY_BATCH_PAYLOAD_DIR": str(tmp_path / "payloads"),  # shared by both processes
        "RELAY_MAX_REQUEST_BYTES": "1024",
        "RELAY_BATCH_MAX_BYTES": "65536",
    }
    idle = RelayProcess(tmp_path / "idle", database_url, {**env, "RELAY_BATCH_WORKERS": "0"})
    workers: RelayProcess | None = None
    try:
        idle.start()
        gw = Gateway(idle, fake_upstream, "x", None)
        gw.apply_catalog()
        big = [chat_item(i, filler="x" * 500) for i in range(20)]  # ~12 kB: over the live limit only
        revoked_id, revoked = gw.mint_key()
        doomed = submit(gw, "openai", big, key=revoked)
        kept = submit(gw, "openai", [chat_item(0)])
        too_big = gw.post("/v1/batches", {"shape": "openai", "requests": [chat_item(0, filler="x" * 70_000)]})
        assert too_big.status_code == 413, too_big.text
        assert "RELAY_BATCH_MAX_BYTES" in too_big.json()["error"]["message"]
        time.sleep(0.5)
        assert status(gw, doomed, revoked)["counts"] == {"available": 20}  # no workers here
        gw.control_write("POST", f"/api/keys/{revoked_id}/revoke", None, 200)
        idle.stop()

        workers = RelayProcess(tmp_path / "workers", database_url, env)
        workers.start()
        gw2 = Gateway(workers, fake_upstream, "x", None)
        gw2.key = gw.key
        view = wait_finished(gw2, kept)
        assert view["counts"] == {"completed": 1}
        # The revoked key cannot read its batch any more; the events tell what happened to it.
        events = wait_events(gw2, doomed, 20, timeout=20)
        assert len(events) == 20
        assert {e["error_message"] for e in events} == {"credential no longer valid: api key revoked"}
        assert all(e["status"] == 0 and e["cost_nanos"] is None for e in events)
        assert results(gw2, kept)[0]["state"] == "completed"
    finally:
        idle.close()
        if workers is not None:
            workers.close()
