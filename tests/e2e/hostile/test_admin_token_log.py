"""The generated admin token is never logged: the log names its file (SPEC §1, §12)."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from pathlib import Path

import httpx

from tests.fixtures.relay_server import RELAY_BIN, free_ports


def test_first_boot_logs_the_admin_token_path_not_the_token(tmp_path: Path) -> None:
    port, control = free_ports(2)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("RELAY_")},
        "RELAY_PORT": str(port),
        "RELAY_CONTROL_PORT": str(control),
        "RELAY_BIND": "127.0.0.1",
        "RELAY_BATCH_WORKERS": "0",
    }
    log_path = tmp_path / "relay.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [RELAY_BIN, "serve"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        token_file = tmp_path / "relay-data" / "admin.token"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if token_file.exists() and httpx.get(f"http://127.0.0.1:{port}/livez").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        token = token_file.read_text().strip()
        answer = httpx.get(
            f"http://127.0.0.1:{control}/api/snapshot", headers={"authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    logs = log_path.read_text()
    assert token not in logs
    assert "relay-data/admin.token" in logs
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
