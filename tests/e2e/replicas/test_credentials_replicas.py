"""Credentials across replicas and restarts (SPEC §3): a revocation or rotation made on one replica
holds on another within 2 s and after a restart; no secret is stored or logged in plaintext; the
``relay keys`` CLI drives the same API."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import MetaData, select

from relay.store.engine import create_engine
from tests.fixtures.polling import wait_for
from tests.fixtures.relay_server import ADMIN_TOKEN, RELAY_BIN, RelayProcess
from tests.integration.control.test_credentials import World, probe


def status(relay: RelayProcess, credential: str) -> int:
    return probe(relay, credential).status_code


def test_revocations_and_rotations_reach_other_replicas_and_survive_restarts(
    postgres_url: str, relay_factory: Any
) -> None:
    a: RelayProcess = relay_factory(postgres_url)
    b: RelayProcess = relay_factory(postgres_url)
    world = World(a)
    key, plaintext = world.key()
    _, rotating = world.key()
    one, other = world.token(), world.token()
    wait_for(
        "b to know the new key and token",
        lambda: status(b, plaintext) == 200 and status(b, one["token"]) == 200,
        2.0,
    )

    a.api("POST", f"/api/keys/{key['id']}/revoke")
    wait_for("b to see the key revoked", lambda: status(b, plaintext) == 401, 2.0)
    a.api("DELETE", f"/api/tokens/{one['jti']}")
    wait_for("b to see the token revoked", lambda: status(b, one["token"]) == 401, 2.0)
    assert status(b, other["token"]) == 200
    rotating_id = next(
        k["id"] for k in a.api("GET", "/api/keys").json()["items"] if k["prefix"] == rotating[:16]
    )
    new = a.api("POST", f"/api/keys/{rotating_id}/rotate", {"grace_seconds": 0}).json()["plaintext"]
    wait_for("b to see the rotation", lambda: status(b, rotating) == 401 and status(b, new) == 200, 2.0)
    b.api("POST", f"/api/users/{world.user['id']}/revoke-tokens")
    wait_for("a to see the revoke-all", lambda: status(a, other["token"]) == 401, 2.0)

    a.stop()
    b.stop()
    c: RelayProcess = relay_factory(postgres_url)
    assert probe(c, plaintext).json()["error"]["message"] == "api key revoked"
    assert probe(c, one["token"]).json()["error"]["code"] == "token_revoked"
    assert probe(c, other["token"]).json()["error"]["code"] == "token_revoked"
    assert probe(c, rotating).json()["error"]["message"] == "api key rotated"
    assert status(c, new) == 200
    world.relay = c
    assert status(c, world.token()["token"]) == 200  # the signing key survived too


def _dump(database_url: str) -> str:
    async def read() -> str:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as conn:
                meta = MetaData()
                await conn.run_sync(meta.reflect)
                parts = []
                for table in meta.sorted_tables:
                    for row in await conn.execute(select(table)):
                        parts.append(repr(tuple(row)))
                return "\n".join(parts)
        finally:
            await engine.dispose()

    return asyncio.run(read())


def test_no_plaintext_key_password_or_token_is_stored_or_logged(
    database_url: str, relay_factory: Any
) -> None:
    relay: RelayProcess = relay_factory(database_url)
    world = World(relay)
    _, plaintext = world.key()
    key2, _ = world.key()
    rotated = relay.api("POST", f"/api/keys/{key2['id']}/rotate", {"grace_seconds": 60}).json()["plaintext"]
    token = world.token()["token"]
    session = httpx.post(
        f"{relay.control_url}/api/auth/login", json={"email": world.user["email"], "password": world.password}
    ).json()["session"]
    for credential in (plaintext, rotated, token, "sk-relay-wrong-key-value-123456"):
        probe(relay, credential)
    dump = _dump(database_url)
    logs = relay.logs()
    secrets = [plaintext, rotated, token, world.password, session, "upstream-secret", ADMIN_TOKEN]
    for secret in secrets:
        assert secret not in dump, secret[:12]
        assert secret not in logs, secret[:12]
    assert "sk-relay-wrong-key" not in logs


def test_relay_keys_cli(relay: RelayProcess, tmp_path: Path) -> None:
    world = World(relay)
    env = {"RELAY_CONTROL_URL": relay.control_url, "RELAY_ADMIN_TOKEN": ADMIN_TOKEN, "PATH": "/usr/bin:/bin"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([RELAY_BIN, "keys", *args], env=env, capture_output=True, text=True, timeout=60)

    created = cli(
        "create",
        "--principal-kind",
        "serviceaccount",
        "--principal",
        world.account["name"],
        "--name",
        "cli-key-" + world.account["name"][-8:],
    )
    assert created.returncode == 0, created.stderr
    plaintext = created.stdout.strip()
    assert plaintext.startswith("sk-relay-") and "\n" not in plaintext
    assert status(relay, plaintext) == 200
    listed = cli("list")
    assert listed.returncode == 0 and plaintext[:16] in listed.stdout and plaintext not in listed.stdout
    key_id = next(
        k["id"] for k in relay.api("GET", "/api/keys").json()["items"] if k["prefix"] == plaintext[:16]
    )
    rotated = cli("rotate", key_id, "--grace-seconds", "0")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert status(relay, plaintext) == 401 and status(relay, new) == 200
    revoked = cli("revoke", key_id)
    assert revoked.returncode == 0 and status(relay, new) == 401
    bad = cli("create", "--principal-kind", "serviceaccount", "--principal", "no-such-account")
    assert bad.returncode == 1 and "422" in bad.stderr and "Traceback" not in bad.stderr
