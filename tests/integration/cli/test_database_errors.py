"""What ``relay serve`` and ``relay migrate`` say when RELAY_DATABASE_URL names a database that is not
there (one line naming it, never "run relay migrate" nor SQLAlchemy's ``DBAPIError … (Background on
this error at: …)``), and that the ``postgres://`` URLs managed-Postgres consoles hand out work.

In process against the machine's real Postgres: ``relay migrate`` through typer's runner, ``relay
serve``'s start (``relay.cli.serve.serve``) on free ports, which stops before any listener opens."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from relay.cli.main import app
from relay.cli.serve import StartupError, serve
from relay.config import load_settings
from tests.fixtures.databases import ADMIN_URL
from tests.fixtures.relay_server import free_port

MASTER_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
ADMIN_TOKEN = "admin-token-0123456789abcdef"


def _missing_database_url() -> tuple[str, str]:
    name = f"relay_missing_{uuid.uuid4().hex[:10]}"
    return make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False), name


def _env(url: str) -> dict[str, str]:
    return {"RELAY_DATABASE_URL": url, "RELAY_MASTER_KEY": MASTER_KEY, "RELAY_ADMIN_TOKEN": ADMIN_TOKEN}


def _assert_names_the_database(line: str, name: str) -> None:
    assert f'the database "{name}" does not exist' in line, line
    assert "createdb" in line and "RELAY_DATABASE_URL" in line, line
    assert "relay migrate" not in line and "Background on this error" not in line, line
    assert "\n" not in line.strip(), line


def test_migrate_names_a_missing_database_in_one_line(postgres_url: str) -> None:
    url, name = _missing_database_url()
    result = CliRunner().invoke(app, ["migrate"], env=_env(url))
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "DBAPIError" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    _assert_names_the_database(lines[0], name)


def test_serve_names_a_missing_database_in_one_line(postgres_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    url, name = _missing_database_url()
    settings = load_settings(
        {
            **_env(url),
            "RELAY_PORT": str(free_port()),
            "RELAY_CONTROL_PORT": "off",
            "RELAY_BIND": "127.0.0.1",
            "RELAY_BATCH_PAYLOAD_DIR": str(tmp_path / "payloads"),
            "RELAY_DATA_DIR": str(tmp_path / "relay-data"),
        }
    )
    with pytest.raises(StartupError) as refused:
        asyncio.run(serve(settings))
    _assert_names_the_database(str(refused.value), name)


@pytest.mark.parametrize("scheme", ["postgres://", "postgres+asyncpg://"])
def test_postgres_scheme_urls_are_accepted_and_migrate(postgres_url: str, scheme: str) -> None:
    url = scheme + postgres_url.removeprefix("postgresql://")
    assert load_settings(_env(url)).database_url == postgres_url.replace(
        "postgresql://", scheme.replace("postgres", "postgresql", 1)
    )
    result = CliRunner().invoke(app, ["migrate"], env=_env(url))
    assert result.exit_code == 0, result.output
    assert "database at revision" in result.output
