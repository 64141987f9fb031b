"""The ``relay`` command: serve, demo, migrate, config, apply, export, fake-upstream.

Server commands load :class:`relay.config.Settings` once and stop with a one-line message on a bad
value. Client commands (apply, export) talk to the control plane over HTTP with
``RELAY_CONTROL_URL`` and ``RELAY_ADMIN_TOKEN`` (falling back to the embedded ``relay-data/admin.token``,
so a local demo needs no setup).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any, NoReturn

import httpx
import typer
import yaml
from rich.console import Console
from rich.table import Table

from relay.config import ConfigError, Settings, load_client_settings, load_settings

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Relay, a self-hosted LLM gateway.")
err = Console(stderr=True)
out = Console()


def fail(message: str, code: int = 1) -> NoReturn:
    # Plain print: one line whatever the terminal width, and no markup parsing of the message.
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        fail(str(exc))


@app.command()
def serve() -> None:
    """Run the inference plane, the control plane and the batch workers in one process."""
    from relay.boot import serve as run
    from relay.logs import configure_logging

    settings = _settings()
    configure_logging(settings.log_level, settings.log_format)
    try:
        asyncio.run(run(settings))
    except (ValueError, OSError) as exc:
        fail(str(exc))


@app.command()
def migrate() -> None:
    """Run the database migrations to the newest schema, then exit."""
    from relay.store.engine import create_engine
    from relay.store.migrate import current_revision, upgrade_to_head

    settings = _settings()

    async def run() -> str | None:
        engine = create_engine(settings.database_url)
        try:
            await upgrade_to_head(engine)
            return await current_revision(engine)
        finally:
            await engine.dispose()

    try:
        revision = asyncio.run(run())
    except OSError as exc:
        fail(f"cannot reach the database: {exc}")
    out.print(f"database at revision {revision}")


@app.command("config")
def show_config() -> None:
    """Print the effective configuration, secrets masked."""
    for name, value in _settings().masked().items():
        out.print(f"{name}={'' if value is None else value}", highlight=False)


def _admin_client() -> httpx.Client:
    client = load_client_settings()
    token = client.admin_token.get_secret_value() if client.admin_token else None
    if token is None:
        path = Path(client.data_dir) / "admin.token"
        if path.exists():
            token = path.read_text().strip()
    if not token:
        fail("RELAY_ADMIN_TOKEN is not set (and no relay-data/admin.token here)")
    return httpx.Client(base_url=client.control_url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


def _call(method: str, path: str, body: Any = None) -> Any:
    with _admin_client() as http:
        try:
            response = http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            fail(f"cannot reach the control plane at {http.base_url}: {exc}")
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 400:
        message = (data or {}).get("error", {}).get("message") if isinstance(data, dict) else None
        fail(f"{response.status_code}: {message or response.text}")
    return data


def _read_documents(path: Path) -> list[Any]:
    if not path.exists():
        fail(f"{path}: no such file")
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except yaml.YAMLError as exc:
        fail(f"{path}: not valid YAML ({exc})")
    flat: list[Any] = []
    for doc in docs:
        flat.extend(doc if isinstance(doc, list) else [doc])
    return flat


@app.command()
def apply(
    file: Path = typer.Option(..., "-f", "--file", help="YAML documents {kind, name, spec}"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan without writing anything"),
    prune: bool = typer.Option(False, "--prune", help="Delete objects of the applied kinds not in the file"),
) -> None:
    """Create or update catalog objects from a YAML file, all or nothing."""
    documents = _read_documents(file)
    result = _call("POST", "/api/apply", {"documents": documents, "dry_run": dry_run, "prune": prune})
    table = Table("kind", "name", "action", title="plan (dry run: nothing written)" if dry_run else "applied")
    for step in result["plan"]:
        table.add_row(step["kind"], step["name"], step["action"])
    out.print(table)


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
) -> None:
    """Run Relay on embedded SQLite with a fake upstream and a demo catalog, until Ctrl-C."""
    from relay.demo import run_demo

    settings = _settings()
    if settings.is_postgres:
        fail("relay demo runs on the embedded SQLite database; unset RELAY_DATABASE_URL")
    try:
        asyncio.run(run_demo(settings, upstream_port))
    except KeyboardInterrupt:
        pass


def main() -> None:
    try:
        app()
    except ConfigError as exc:  # pragma: no cover - defensive: settings errors are handled per command
        err.print(f"error: {exc}")
        sys.exit(1)
