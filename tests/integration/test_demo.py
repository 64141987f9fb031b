"""``relay demo`` (the newcomer's first command): embedded SQLite, fake upstream, demo catalog,
working control API — and a second start reuses everything instead of failing or duplicating."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.fixtures.relay_server import RELAY_BIN, free_port


def start_demo(workdir: Path, port: int, control_port: int, upstream_port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update({"RELAY_PORT": str(port), "RELAY_CONTROL_PORT": str(control_port), "RELAY_BIND": "127.0.0.1"})
    return subprocess.Popen(
        [RELAY_BIN, "demo", "--upstream-port", str(upstream_port)],
        cwd=workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_banner(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip().startswith("eyJ"):  # the inference token is the banner's last line
            return "".join(lines)
    raise AssertionError("demo banner not printed:\n" + "".join(lines))


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def test_demo_runs_and_restarts_cleanly(tmp_path: Path) -> None:
    port, control_port, upstream_port = free_port(), free_port(), free_port()
    proc = start_demo(tmp_path, port, control_port, upstream_port)
    try:
        banner = read_banner(proc)
        assert f"http://127.0.0.1:{port}" in banner and f"http://127.0.0.1:{control_port}/api" in banner
        assert f"http://127.0.0.1:{upstream_port}" in banner
        assert "written this start" in banner
        admin = (tmp_path / "relay-data" / "admin.token").read_text().strip()
        assert admin in banner  # printed once, on the first boot only
        control = httpx.Client(
            base_url=f"http://127.0.0.1:{control_port}", headers={"Authorization": f"Bearer {admin}"}
        )
        models = {m["name"] for m in control.get("/api/models").json()["items"]}
        assert {"gpt-4o-mini", "claude-haiku", "gpt-4-1-mini", "text-embedding-3-small"} <= models
        adapters = {b["adapter"] for b in control.get("/api/bindings").json()["items"]}
        assert adapters == {"openai", "anthropic", "openai_responses"}
        counts = control.get("/api/snapshot").json()["counts"]
        assert counts["hosts"] == 3 and counts["policies"] == 1 and counts["service_accounts"] == 1
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        key = banner.split("export RELAY_API_KEY=")[1].split()[0]
        token = next(line.strip() for line in banner.splitlines() if line.strip().startswith("eyJ"))
        # The printed snippets work against the demo's fake upstream.
        for line in banner.splitlines():
            if line.strip().startswith("-d '"):
                payload = line.strip()[4:-1]
                path = "/anthropic/v1/messages" if 'claude-haiku", "max_tokens' in payload else None
                path = path or ("/v1/generate" if '"stream": true' in payload else "/v1/chat/completions")
                answer = httpx.post(
                    f"http://127.0.0.1:{port}{path}",
                    content=payload,
                    headers={"Authorization": f"Bearer {key}", "x-api-key": key},
                )
                assert answer.status_code == 200, (path, answer.text)
                assert "Echo:" in answer.text and "hello" in answer.text
        for credential in (key, token):
            listed = httpx.get(
                f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {credential}"}
            )
            assert listed.status_code == 200 and "gpt-4o-mini" in listed.text
        assert httpx.get(f"http://127.0.0.1:{upstream_port}/health").status_code == 200
        dashboard = f"http://127.0.0.1:{control_port}/ui/"
        assert dashboard in banner  # SPEC §16: the demo prints the dashboard's URL, and it answers
        assert "Sign in to Relay" in httpx.get(dashboard, follow_redirects=True).text
    finally:
        assert stop(proc) in (0, 130, -signal.SIGINT)
    # The fake upstream child is gone with it.
    try:
        httpx.get(f"http://127.0.0.1:{upstream_port}/health", timeout=1)
        raise AssertionError("the fake upstream outlived the demo")
    except httpx.TransportError:
        pass

    again = start_demo(tmp_path, port, control_port, upstream_port)
    try:
        banner = read_banner(again)
        assert "(0 written this start)" in banner
        assert admin not in banner  # the admin token is not printed again
        assert f"RELAY_API_KEY={key}" in banner  # the demo key is reused, not minted again
    finally:
        stop(again)
