"""The ``relay`` command's conventions: flags shown as flags, ``--version``, ``serve --help`` listing every
setting (from ``relay.config``), ``apply --dry-run`` with a per-field diff, and no "SPEC §" anywhere a
user reads it (help, errors, log lines)."""

from __future__ import annotations

import ast
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import typer
from typer.testing import CliRunner

from relay.cli.main import app
from relay.config import STANDARD_VARIABLES, Settings
from tests.fixtures.relay_server import RELAY_BIN
from tests.integration.cli.demo_process import Demo, clean_env

SRC = Path(__file__).resolve().parents[3] / "src" / "relay"


def commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under a group (typer vendors its own click: duck-typed)."""
    found = [prefix]
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


def test_every_help_shows_flags_without_a_value_and_cites_no_spec() -> None:
    root = typer.main.get_command(app)
    runner = CliRunner()
    paths = commands(root)
    assert ("batch", "submit") in paths and ("apply",) in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "<bool>" not in result.output, (path, result.output)
        assert "SPEC" not in result.output and "§" not in result.output, (path, result.output)
    apply_help = runner.invoke(app, ["apply", "--help"]).output
    assert any(
        line.split()[:1] == ["--dry-run"] and "Show the plan" in line for line in apply_help.splitlines()
    )


def test_version() -> None:
    done = subprocess.run(
        [RELAY_BIN, "--version"], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == f"relay {version('relay')}"


def test_serve_help_lists_every_setting() -> None:
    done = subprocess.run(
        [RELAY_BIN, "serve", "--help"], capture_output=True, text=True, env=clean_env(), timeout=60
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for name in Settings.model_fields:  # settings added later show up without touching this test
        variable = STANDARD_VARIABLES.get(name) or f"RELAY_{name.upper()}"  # OTEL_* ones (SPEC §18)
        assert any(line.strip().startswith(f"{variable} (default ") for line in lines), name
    assert any(line.strip() == "RELAY_PORT (default 8080): inference plane port" for line in lines)
    assert any(line.strip().startswith("RELAY_BIND (default 0.0.0.0)") for line in lines)


def _strings_users_read(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings (help texts, messages, log formats), plus a
    migration's docstring first line (Alembic logs it at every upgrade). A bare string statement (a
    module, class, function or attribute docstring) is for readers of the code."""
    tree = ast.parse(path.read_text())
    statements = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in statements
    ]
    if "migrations" in path.parts:
        doc = ast.get_docstring(tree) or ""
        found.append((1, doc.splitlines()[0] if doc else ""))
    return found


def test_no_spec_citations_in_user_facing_text() -> None:
    cited = [
        f"{path.relative_to(SRC)}:{line}: {text[:80]!r}"
        for path in sorted(SRC.rglob("*.py"))
        for line, text in _strings_users_read(path)
        if "SPEC" in text or "§" in text
    ]
    assert cited == []


def test_apply_dry_run_shows_each_changed_field(demo: Demo, tmp_path: Path) -> None:
    catalog = tmp_path / "changed.yaml"
    catalog.write_text(
        """kind: Team
name: demo
spec: {display_name: Ops}
---
kind: Policy
name: demo
spec:
  models: ["*"]
  host_keys: [openai-key-1, anthropic-key-1, responses-key-1]
  key_selection: prioritized
  rate_limit:
    rules:
      - {meter: requests, limit: 90, window: 1m}
  batch: {pacing: wait, live_reserve: 0.2}
---
kind: HostKey
name: openai-key-1
spec: {host: openai, value: a-new-secret-value}
---
kind: Model
name: gpt-4o-mini
spec: {provider: openai, aliases: [gpt-4o-mini-latest]}
"""
    )
    done = demo.cli("apply", "-f", str(catalog), "--dry-run")
    assert done.returncode == 0, done.stderr
    rows = {tuple(line.split("\t")[:3]): line.split("\t")[3] for line in done.stdout.splitlines()[1:]}
    assert rows[("Team", "demo", "update")] == 'display_name: "Demo team" → "Ops"'
    assert rows[("Policy", "demo", "update")] == "rate_limit.rules[0].limit: 600 → 90"
    assert rows[("HostKey", "openai-key-1", "update")] == 'value: "********" → "********"'
    assert rows[("Model", "gpt-4o-mini", "unchanged")] == ""
    assert "a-new-secret-value" not in done.stdout + done.stderr
    assert "dry run: nothing written" in done.stderr
    # The API carries the same, top-level fields only, and only on updates.
    headers = {"Authorization": f"Bearer {demo.admin_token}"}
    plan = httpx.post(
        f"{demo.control_url}/api/apply",
        headers=headers,
        json={
            "documents": [
                {"kind": "Team", "name": "demo", "spec": {"display_name": "Ops"}},
                {
                    "kind": "Model",
                    "name": "gpt-4o-mini",
                    "spec": {"provider": "openai", "aliases": ["gpt-4o-mini-latest"]},
                },
            ],
            "dry_run": True,
        },
    ).json()["plan"]
    assert plan == [
        {
            "kind": "Team",
            "name": "demo",
            "action": "update",
            "changes": {"display_name": {"from": "Demo team", "to": "Ops"}},
        },
        {"kind": "Model", "name": "gpt-4o-mini", "action": "unchanged"},
    ]
    team = httpx.get(f"{demo.control_url}/api/teams/demo", headers=headers).json()
    assert team["display_name"] == "Demo team"  # nothing written
    passed_a_value = demo.cli("apply", "-f", str(catalog), "--dry-run", "true")
    assert passed_a_value.returncode == 2  # a flag takes no value: click says so
