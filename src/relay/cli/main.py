"""The ``relay`` command: serve, demo, migrate, config, apply, export, keys, users, tokens, batch,
audit, fake-upstream.

Server commands load :class:`relay.config.Settings` once and stop with a one-line message on a bad
value. Client commands (apply, export) talk to the control plane over HTTP with
``RELAY_CONTROL_URL`` and ``RELAY_ADMIN_TOKEN`` (falling back to the embedded ``relay-data/admin.token``,
so a local demo needs no setup).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import typer
import uvloop
import yaml

from relay.cli.accounts import tokens_app, users_app
from relay.cli.audit import audit_app
from relay.cli.batch import batch_app
from relay.cli.settings_help import settings_help
from relay.cli.support import admin_call as _call
from relay.cli.support import err, fail, out, print_table
from relay.config import ConfigError, Settings, load_settings
from relay.yaml_documents import DocumentsRefused, load_documents_with_lines, yaml_problem

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Relay, a self-hosted LLM gateway.",
)
app.add_typer(batch_app, name="batch")
app.add_typer(users_app, name="users")
app.add_typer(tokens_app, name="tokens")
app.add_typer(audit_app, name="audit")


def _version(value: bool) -> None:
    if value:
        print(f"relay {package_version('relay')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit"
    ),
) -> None:
    """Relay, a self-hosted LLM gateway."""


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc))


SETTINGS_EPILOG = (
    "Settings: environment variables, read once at start (a bad value stops the start with a "
    "one-line message naming it); `relay config` prints the effective values.\n\n\b\n" + settings_help()
)


@app.command(epilog=SETTINGS_EPILOG)
def serve() -> None:
    """Run the inference plane, the control plane and the batch workers in one process."""
    from relay.cli.serve import serve as run
    from relay.telemetry.logs import configure_logging

    settings = _settings()
    configure_logging(settings.log_level, settings.log_format)
    try:
        # uvloop: 10-40 % less CPU per proxied request than asyncio's own loop (docs/benchmarks.md).
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(run(settings))
    except (ValueError, OSError) as exc:
        fail(str(exc))


@app.command()
def migrate(
    rebuild_usage_rollup: bool = typer.Option(
        False,
        "--rebuild-usage-rollup",
        help="Then recompute the usage rollup from the events, in one transaction (after replicas of a "
        "release before 0024 wrote events without it: docs/usage.md)",
    ),
) -> None:
    """Run the database migrations to the newest schema, then exit."""
    from sqlalchemy.exc import DBAPIError

    from relay.store import usage_rollup
    from relay.store.engine import create_engine, startup_problem
    from relay.store.migrate import current_revision, upgrade_to_head

    settings = _settings()

    async def run() -> str | None:
        engine = create_engine(settings.database_url)
        try:
            await upgrade_to_head(engine)
            if rebuild_usage_rollup:
                async with engine.execution_options(sqlite_begin="IMMEDIATE").begin() as conn:
                    await usage_rollup.rebuild(conn)
            return await current_revision(engine)
        finally:
            await engine.dispose()

    try:
        revision = asyncio.run(run())
    except (OSError, DBAPIError) as exc:
        fail(startup_problem(exc, str(settings.masked()["RELAY_DATABASE_URL"])))
    out.print(f"database at revision {revision}")


@app.command("config")
def show_config() -> None:
    """Print the effective configuration, secrets masked."""
    settings = _settings()
    for name, value in settings.masked().items():
        out.print(f"{name}={'' if value is None else value}", highlight=False)
    from relay.pricing.catalog import load_catalog

    prices = load_catalog()
    out.print(f"price catalog: {len(prices.models)} models, prices checked {prices.date}", highlight=False)
    out.print(f"unpriced bindings: {_unpriced_bindings(settings.database_url)}", highlight=False)


def _unpriced_bindings(database_url: str) -> str:
    """The enabled bindings without prices (SPEC §8: their calls are not priced, budgets skip them),
    read from the database if it answers within 5 s; never creates a database file."""
    from relay.store import catalog as store
    from relay.store import tables
    from relay.store.engine import create_engine

    if database_url.startswith("sqlite:///") and not Path(database_url.removeprefix("sqlite:///")).exists():
        return "none (no database yet)"

    async def read() -> list[str]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as conn:
                rows = await store.list_rows(conn, tables.bindings)
        finally:
            await engine.dispose()
        return [
            r["name"]
            for r in rows
            if r["enabled"]
            and not all(isinstance((r["pricing"] or {}).get(k), int | float) for k in ("input", "output"))
        ]

    try:
        names = asyncio.run(asyncio.wait_for(read(), 5))
    except Exception:  # unreachable, not migrated: config still prints; the URL may hold a password
        return "unknown (the database did not answer)"
    return ", ".join(names) if names else "none"


def _read_documents(path: Path) -> tuple[list[Any], list[int]]:
    """The documents of ``path`` and the line each starts on."""
    if not path.exists():
        fail(f"{path}: no such file")
    try:
        return load_documents_with_lines(path)  # bounded: sizes, aliases (billion laughs → one line)
    except DocumentsRefused as exc:
        fail(f"{path}: refused: {exc}")
    except yaml.YAMLError as exc:
        fail(f"{path}: not valid YAML: {yaml_problem(exc)}")


@app.command()
def apply(
    file: Path = typer.Option(..., "-f", "--file", help="YAML documents {kind, name, spec}"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan without writing anything"),
    prune: bool = typer.Option(False, "--prune", help="Delete objects of the applied kinds not in the file"),
) -> None:
    """Create or update catalog objects from a YAML file, all or nothing."""
    documents, lines = _read_documents(file)

    def explain(message: str) -> str:
        """``documents[i]`` in a refusal, pointed at the line of ``file`` where that document starts."""

        def at_line(found: re.Match[str]) -> str:
            index = int(found.group(1))
            return f"{found.group(0)} at line {lines[index]}" if index < len(lines) else found.group(0)

        return f"{file}: " + _DOCUMENT_INDEX.sub(at_line, message, count=1)

    body = {"documents": documents, "dry_run": dry_run, "prune": prune}
    result = _call("POST", "/api/apply", body, explain=explain)
    rows = [
        [step["kind"], step["name"], step["action"], _changes_text(step.get("changes"))]
        for step in result["plan"]
    ]
    title = "plan (dry run: nothing written)" if dry_run else "applied"
    print_table(["kind", "name", "action", "changes"], rows, title)
    for step in result["plan"]:
        if step.get("secret"):
            # Generated for a new webhook; the control plane never shows it again (SPEC §10.10). On
            # stderr, so the plan on stdout stays one table for scripts.
            typer.echo(
                f"{step['kind']} {step['name']}: secret {step['secret']} (shown once: store it now)", err=True
            )


_DOCUMENT_INDEX = re.compile(r"\bdocuments\[(\d+)\]")


def _changes_text(changes: dict[str, dict[str, Any]] | None) -> str:
    """``field: old → new`` per changed field (nested values down to the leaf that differs, e.g.
    ``rate_limit.rules[0].limit: 600 → 100``), values as JSON; write-only ones arrive masked."""
    if not changes:
        return ""
    lines: list[str] = []
    for field, change in changes.items():
        _diff(field, change.get("from"), change.get("to"), lines)
    return "; ".join(lines)


def _diff(path: str, old: Any, new: Any, lines: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            if old.get(key) != new.get(key):
                _diff(f"{path}.{key}", old.get(key), new.get(key), lines)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            if a != b:
                _diff(f"{path}[{index}]", a, b, lines)
    else:
        lines.append(f"{path}: {json.dumps(old)} → {json.dumps(new)}")


@app.command()
def export(
    output: Path | None = typer.Option(None, "-o", "--output", help="File to write (default stdout)"),
) -> None:
    """Write the catalog as YAML documents for relay apply (no secrets)."""
    documents = _call("GET", "/api/export")["documents"]
    text = yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        err.print(f"wrote {len(documents)} documents to {output}")


keys_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Relay keys (create, list, rotate, revoke), over the control API (RELAY_CONTROL_URL).",
)
app.add_typer(keys_app, name="keys")


@keys_app.command("create")
def keys_create(
    principal_kind: str = typer.Option(..., "--principal-kind", help="serviceaccount | user"),
    principal: str = typer.Option(..., "--principal", help="Service account or user (name or id)"),
    policy: str | None = typer.Option(None, "--policy", help="Policy for this key (name or id)"),
    project: str | None = typer.Option(None, "--project", help="Project, for a user in several projects"),
    expires_at: str | None = typer.Option(None, "--expires-at", help="RFC 3339 expiry"),
    name: str | None = typer.Option(None, "--name", help="Name (default: the key's prefix)"),
) -> None:
    """Create a key and print its plaintext (shown this once) on stdout."""
    body: dict[str, Any] = {"principal_kind": principal_kind, "principal": principal}
    for field, value in (
        ("policy", policy),
        ("project", project),
        ("expires_at", expires_at),
        ("name", name),
    ):
        if value is not None:
            body[field] = value
    created = _call("POST", "/api/keys", body)
    err.print(
        f"created key {created['key']['name']} ({created['key']['id']}); the plaintext is shown only now:"
    )
    print(created["plaintext"])


@keys_app.command("list")
def keys_list() -> None:
    """List keys (prefix, owner, state); never a plaintext or hash."""
    rows = []
    for key in _call("GET", "/api/keys")["items"]:
        state = "revoked" if key["revoked_at"] else ("enabled" if key["enabled"] else "disabled")
        owner = f"{key['principal_kind']}:{key['principal']}"
        rows.append(
            [
                key["id"],
                key["name"],
                key["prefix"],
                owner,
                key["project"] or "",
                key["policy"] or "",
                state,
                key["expires_at"] or "",
            ]
        )
    print_table(["id", "name", "prefix", "principal", "project", "policy", "state", "expires_at"], rows)


@keys_app.command("rotate")
def keys_rotate(
    key: str = typer.Argument(..., help="Key id or name"),
    grace_seconds: int = typer.Option(
        0, "--grace-seconds", help="How long the old plaintext keeps working (0-86400)"
    ),
) -> None:
    """Replace a key's plaintext; print the new one on stdout."""
    rotated = _call("POST", f"/api/keys/{key}/rotate", {"grace_seconds": grace_seconds})
    until = rotated["key"]["grace_until"]
    err.print(f"rotated {rotated['key']['name']}; the old plaintext works until {until}")
    print(rotated["plaintext"])


@keys_app.command("revoke")
def keys_revoke(key: str = typer.Argument(..., help="Key id or name")) -> None:
    """Revoke a key for good."""
    revoked = _call("POST", f"/api/keys/{key}/revoke")
    out.print(f"revoked {revoked['name']} at {revoked['revoked_at']}")


@app.command("fake-upstream")
def fake_upstream(
    host: str = typer.Option("127.0.0.1"),
    port: int = typer.Option(9000),
    latency_ms: float = typer.Option(0.0, help="Fixed latency before each response"),
    jitter_ms: float = typer.Option(0.0, help="Extra uniform random latency"),
) -> None:
    """Run the fake LLM upstream (OpenAI and Anthropic shapes) used by the demo, tests and benchmarks."""
    from relay.fake_upstream import serve as serve_fake
    from relay.fake_upstream.config import FakeConfig

    serve_fake(host, port, FakeConfig(latency_ms=latency_ms, jitter_ms=jitter_ms))


@app.command()
def demo(
    upstream_port: int = typer.Option(9009, help="Port of the demo's fake upstream"),
    bind: str | None = typer.Option(
        None, "--bind", help="Address to listen on (default 127.0.0.1: this machine only; or RELAY_BIND)"
    ),
) -> None:
    """Run Relay on embedded SQLite with a fake upstream and a demo catalog, until Ctrl-C."""
    from relay.cli.demo import run_demo
    from relay.telemetry.logs import configure_logging

    settings = _settings()
    # Unlike `relay serve`, the demo keeps to this machine unless told otherwise.
    chosen = bind or (settings.bind if "bind" in settings.model_fields_set else "127.0.0.1")
    settings = settings.model_copy(update={"bind": chosen})
    configure_logging(settings.log_level, settings.log_format)
    if settings.is_postgres:
        fail("relay demo runs on the embedded SQLite database; unset RELAY_DATABASE_URL")
    try:
        asyncio.run(run_demo(settings, upstream_port))
    except KeyboardInterrupt:
        pass
    except (ValueError, OSError) as exc:
        fail(str(exc))


def main() -> None:
    try:
        app()
    except ConfigError as exc:  # pragma: no cover - defensive: settings errors are handled per command
        err.print(f"error: {exc}")
        sys.exit(1)
