"""``relay demo`` (the newcomer's first command): embedded SQLite, fake upstream, demo catalog,
working control API, loopback only — a second start reuses everything, keeps the operator's changes
and creates only what is missing; a busy port is one line naming the setting that changes it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.fixtures.relay_server import RELAY_BIN, free_port, free_ports


def start_demo(workdir: Path, port: int, control_port: int, upstream_port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    env.update({"RELAY_PORT": str(port), "RELAY_CONTROL_PORT": str(control_port)})  # no RELAY_BIND
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


def listening_addresses(port: int) -> set[str]:
    """The local IPv4 addresses listening on ``port`` (from /proc/net/tcp: state 0A is LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_demo_runs_and_restarts_cleanly(tmp_path: Path) -> None:
    port, control_port, upstream_port = free_ports(3)
    proc = start_demo(tmp_path, port, control_port, upstream_port)
    try:
        banner = read_banner(proc)
        assert f"http://127.0.0.1:{port}" in banner and f"http://127.0.0.1:{control_port}/api" in banner
        assert f"http://127.0.0.1:{upstream_port}" in banner
        assert "19 objects created" in banner
        # Loopback only, and the banner says so.
        assert "listening on     127.0.0.1 only: this machine" in banner
        assert listening_addresses(port) == {"127.0.0.1"} == listening_addresses(control_port)
        # The banner's commands reach this demo, whatever its ports.
        assert (
            f"export RELAY_URL=http://127.0.0.1:{port} RELAY_CONTROL_URL=http://127.0.0.1:{control_port}"
            in banner
        )
        export_line = next(line.strip() for line in banner.splitlines() if line.strip().endswith(" export"))
        assert export_line.startswith(f"RELAY_CONTROL_URL=http://127.0.0.1:{control_port} ")
        exported = subprocess.run(
            ["bash", "-c", export_line.replace(export_line.split()[1], RELAY_BIN, 1)],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("RELAY_")},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert exported.returncode == 0 and "kind: Team" in exported.stdout, exported.stderr
        admin = (tmp_path / "relay-data" / "admin.token").read_text().strip()
        # stdout is a pipe here, not a terminal: it is a log, so the token is named by its file only
        assert admin not in banner and "admin.token" in banner
        control = httpx.Client(
            base_url=f"http://127.0.0.1:{control_port}", headers={"Authorization": f"Bearer {admin}"}
        )
        models = {m["name"] for m in control.get("/api/models").json()["items"]}
        assert {"gpt-4o-mini", "claude-haiku", "gpt-4-1-mini", "text-embedding-3-small"} <= models
        adapters = {b["adapter"] for b in control.get("/api/bindings").json()["items"]}
        assert adapters == {"openai", "anthropic", "openai_responses"}
        counts = control.get("/api/snapshot").json()["counts"]
        assert counts["hosts"] == 3 and counts["policies"] == 1 and counts["service_accounts"] == 1
        # SPEC §17: the demo policy paces a first big batch and keeps a live share, so it finishes.
        batch = control.get("/api/policies/demo").json()["batch"]
        assert batch == {"pacing": "wait", "live_reserve": 0.2, "max_concurrency": None, "translate": False}
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
        # An operator's changes, which the next start must keep: a renamed team, a deleted binding.
        assert control.patch("/api/teams/demo", json={"display_name": "Ops"}).status_code == 200
        assert control.delete("/api/bindings/embeddings-openai").status_code == 204
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
        assert "18 objects already there, kept as they are; 1 missing created" in banner
        assert "changed since, not reverted: Team demo (display_name)" in banner
        assert control.get("/api/teams/demo").json()["display_name"] == "Ops"
        assert control.get("/api/bindings/embeddings-openai").status_code == 200
        assert admin not in banner  # the admin token is not printed again
        assert f"RELAY_API_KEY={key}" in banner  # the demo key is reused, not minted again
    finally:
        stop(again)


@contextmanager
def occupied() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RELAY_")}
    return subprocess.run(
        [RELAY_BIN, *args], cwd=cwd, env=base | env, capture_output=True, text=True, timeout=90
    )


def test_a_busy_port_is_one_line_naming_what_changes_it(tmp_path: Path) -> None:
    port, control_port = free_ports(2)
    free = {"RELAY_PORT": str(port), "RELAY_CONTROL_PORT": str(control_port)}
    with occupied() as busy:
        cases = [
            (
                ["demo", "--upstream-port", str(busy)],
                free,
                "the demo's fake upstream",
                "pass --upstream-port",
            ),
            (
                ["demo", "--upstream-port", str(free_port())],
                free | {"RELAY_PORT": str(busy)},
                "the inference plane",
                "set RELAY_PORT",
            ),
            (
                ["demo", "--upstream-port", str(free_port())],
                free | {"RELAY_CONTROL_PORT": str(busy)},
                "the control plane",
                "set RELAY_CONTROL_PORT",
            ),
            (
                ["serve"],
                free | {"RELAY_PORT": str(busy), "RELAY_BIND": "127.0.0.1"},
                "the inference plane",
                "set RELAY_PORT",
            ),
        ]
        for n, (args, env, what, fix) in enumerate(cases):
            workdir = tmp_path / f"case{n}"
            workdir.mkdir()
            done = run(args, workdir, **env)
            output = (done.stdout + done.stderr).strip()
            assert done.returncode == 1, output
            hint = " (with make: make demo DEMO_ARGS='--upstream-port <port>')" if "upstream" in what else ""
            assert output == (
                f"error: port {busy} ({what}) is already in use on 127.0.0.1: stop what holds it, "
                f"or {fix} to a free port{hint}"
            ), output


def test_make_demo_passes_demo_args_to_relay_demo() -> None:
    """The busy-port error tells a `make demo` user to pass DEMO_ARGS: make must hand them on."""
    make = shutil.which("make")
    assert make, "make is needed to check the Makefile"
    repo = Path(__file__).resolve().parents[3]
    dry_run = [make, "-n", "demo", "DEMO_ARGS=--upstream-port 9123 --bind 127.0.0.1"]
    out = subprocess.run(dry_run, cwd=repo, capture_output=True, text=True, timeout=60, check=True).stdout
    (line,) = [
        line for line in out.splitlines() if line.endswith("relay demo --upstream-port 9123 --bind 127.0.0.1")
    ]
    assert line.startswith(".venv/bin/relay"), out
