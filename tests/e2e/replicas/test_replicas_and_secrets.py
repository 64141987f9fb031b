"""Several ``relay serve`` processes on one database: catalog changes reach every replica's snapshot
within 2 s (SPEC §2), and upstream key values are stored encrypted (SPEC §1)."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from relay.store.engine import create_engine
from tests.fixtures.polling import wait_for
from tests.fixtures.relay_server import RelayProcess


def test_write_on_one_replica_reaches_the_other_within_2s(postgres_url: str, relay_factory: Any) -> None:
    a: RelayProcess = relay_factory(postgres_url)
    b: RelayProcess = relay_factory(postgres_url)
    for step in range(3):
        before = b.api("GET", "/api/snapshot").json()
        name = f"team-{uuid.uuid4().hex[:8]}"
        a.create("teams", {"name": name})
        expected = before["counts"]["teams"] + 1
        wait_for(
            "the other replica to see the write (SPEC §2: within 2 s)",
            lambda n=expected: b.api("GET", "/api/snapshot").json()["counts"]["teams"] == n,
            2.0,
        )
        assert b.api("GET", "/api/snapshot").json()["revision"] > before["revision"], step
    # and the other way round, for a delete
    count = a.api("GET", "/api/snapshot").json()["counts"]["teams"]
    assert b.api("DELETE", f"/api/teams/{name}").status_code == 204
    wait_for(
        "the first replica to see the delete (SPEC §2: within 2 s)",
        lambda: a.api("GET", "/api/snapshot").json()["counts"]["teams"] == count - 1,
        2.0,
    )


def test_snapshot_survives_a_replica_restart(postgres_url: str, relay_factory: Any) -> None:
    a: RelayProcess = relay_factory(postgres_url)
    a.create("teams", {"name": "persisted"})
    a.stop()
    b: RelayProcess = relay_factory(postgres_url)
    assert b.api("GET", "/api/snapshot").json()["counts"]["teams"] == 1
    assert b.api("GET", "/api/teams/persisted").status_code == 200


def _raw_host_keys(database_url: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as conn:
                return [dict(r._mapping) for r in await conn.execute(text("SELECT * FROM host_keys"))]
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_host_key_values_are_encrypted_at_rest(database_url: str, relay_factory: Any, tmp_path: Path) -> None:
    relay: RelayProcess = relay_factory(database_url)
    secret = "sk-live-" + uuid.uuid4().hex
    relay.create("hosts", {"name": "upstream", "base_url": "https://api.example.com"})
    relay.create("host-keys", {"name": "k1", "host": "upstream", "value": secret})
    rows = _raw_host_keys(database_url)
    assert len(rows) == 1
    sealed = rows[0]["value_encrypted"]
    assert sealed and secret.encode() not in bytes(sealed)
    dump = repr(rows)
    assert secret not in dump
    if database_url.startswith("sqlite"):
        db_file = Path(database_url.removeprefix("sqlite:///"))
        relay.stop()
        for path in db_file.parent.glob(db_file.name + "*"):  # the file and its WAL
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in relay.logs()


def test_a_wrong_master_key_stops_the_start_with_one_line(database_url: str, relay_factory: Any) -> None:
    first: RelayProcess = relay_factory(database_url)
    first.create("hosts", {"name": "upstream", "base_url": "https://api.example.com"})
    first.create("host-keys", {"name": "k1", "host": "upstream", "value": "sk-abc"})
    assert first.api("GET", "/api/snapshot").json()["problems"] == []
    first.stop()
    other_key = base64.b64encode(os.urandom(32)).decode()
    with pytest.raises(RuntimeError) as info:
        relay_factory(database_url, env={"RELAY_MASTER_KEY": other_key})
    assert "error: RELAY_MASTER_KEY: does not open the secrets stored in this database" in str(info.value)
    assert "Traceback" not in str(info.value)


def test_an_unset_key_variable_is_reported_not_used(database_url: str, relay_factory: Any) -> None:
    relay: RelayProcess = relay_factory(database_url)
    relay.create("hosts", {"name": "upstream", "base_url": "https://api.example.com"})
    relay.create(
        "host-keys", {"name": "k-env", "host": "upstream", "value_from_env": "RELAY_TEST_UNSET_KEY_VAR"}
    )
    problems = relay.api("GET", "/api/snapshot").json()["problems"]
    assert problems == ["host key k-env: environment variable RELAY_TEST_UNSET_KEY_VAR is unset"]
