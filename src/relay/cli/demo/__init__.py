"""``relay demo``: Relay on embedded SQLite with the fake upstream and a demo catalog.

The one place a newcomer starts: it must show everything working with no setup. It starts the fake
upstream as a child process, serves Relay in this process, applies ``catalog.yaml`` through the same
apply service the control API uses, and prints how to reach everything.

Why the catalog is applied only where objects are missing: after the first start the catalog is the
operator's (a team renamed or a limit changed with ``relay apply`` must survive a restart), so a later
start creates what is missing, changes nothing else, and names the objects that differ from the demo's.
It listens on 127.0.0.1 unless told otherwise (``relay demo --bind``, or ``RELAY_BIND``): the demo's
control plane and ``/metrics`` are not for the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from relay.boot import Runtime
from relay.cli.serve import StartupError, listen, local_host, serve
from relay.config import Settings
from relay.domain.credentials import hash_key

# Most newcomers start the demo with `make demo`, which passes DEMO_ARGS on: say how, where an error
# asks for the flag.
MAKE_HINT = " (with make: make demo DEMO_ARGS='--upstream-port <port>')"


def demo_documents(upstream_base_url: str) -> list[dict[str, object]]:
    text = resources.files("relay.cli.demo").joinpath("catalog.yaml").read_text()
    return [d for d in yaml.safe_load_all(text.replace("${UPSTREAM}", upstream_base_url)) if d]


async def _start_fake_upstream(port: int) -> tuple[asyncio.subprocess.Process, str]:
    listen(
        "127.0.0.1", port, "the demo's fake upstream", "--upstream-port", MAKE_HINT
    ).close()  # busy: one line
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relay.fake_upstream",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    line = await proc.stdout.readline()
    if not line:
        problem = (await proc.stderr.read()).decode(errors="replace").strip().splitlines()
        detail = f": {problem[-1]}" if problem else ""
        raise StartupError(
            f"the demo's fake upstream did not start on port {port}{detail} (--upstream-port{MAKE_HINT})"
        )
    # Its stderr is not read from here on: nothing more is written there unless it crashes.
    return proc, line.decode().strip().rsplit(" ", 1)[-1]


async def demo_credentials(runtime: Runtime, data_dir: Path) -> tuple[str, str]:
    """A relay key for the demo service account (kept in relay-data/demo.key, reused while valid) and
    a fresh one-hour inference token for the demo user."""
    path = data_dir / "demo.key"
    plaintext = path.read_text().strip() if path.exists() else ""
    if not plaintext or hash_key(plaintext) not in runtime.reloader.snapshot.key_by_hash:
        created = await runtime.keys.create(
            {"principal_kind": "serviceaccount", "principal": "demo-app", "name": f"demo-{int(time.time())}"}
        )
        plaintext = created["plaintext"]
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(plaintext + "\n")
    token = await runtime.tokens.mint_for_user("demo-user", {"project": "demo", "ttl_seconds": 3600})
    return plaintext, token["token"]


def relay_command() -> str:
    """How this terminal runs ``relay``: ``.venv/bin/relay`` from a checkout, else the command's path."""
    argv0 = Path(sys.argv[0])
    if argv0.name != "relay" or not argv0.exists():
        return "relay"
    try:
        return str(argv0.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return "relay" if shutil.which("relay") == str(argv0) else str(argv0)


def catalog_line(plan: list[dict[str, Any]], created: int) -> str:
    """What this start did to the catalog, truthfully."""
    if created == len(plan):
        return f"{created} objects created"
    line = f"{len(plan) - created} objects already there, kept as they are; {created} missing created"
    differ = [
        f"{s['kind']} {s['name']} ({', '.join(s.get('changes', {}))})"
        for s in plan
        if s["action"] == "update"
    ]
    if differ:
        line += "\n                   changed since, not reverted: " + "; ".join(differ)
    return line


def banner(settings: Settings, runtime: Runtime, upstream: str, catalog: str) -> str:
    host = local_host(settings.bind)
    control = f"http://{host}:{settings.control_port}"
    token = runtime.secrets.admin_token_path or "$RELAY_ADMIN_TOKEN"
    where = f"in {token}"
    # The log never holds the admin token; an interactive terminal may show it, once, when it is new
    # (under docker or a pipe, stdout is a log: there only the file is named).
    if sys.stdout.isatty() and any(
        "admin token" in note for note in getattr(runtime.secrets, "generated", ())
    ):
        where = f"{runtime.secrets.admin_token} (in {token}; shown this first time only)"
    if settings.bind in ("127.0.0.1", "::1", "localhost"):
        reach = f"{settings.bind} only: this machine (relay demo --bind 0.0.0.0 opens it to the network)"
    elif settings.bind in ("0.0.0.0", "::", ""):
        reach = (
            f"every interface ({settings.bind or '0.0.0.0'}): "
            "the control plane and /metrics are reachable from the network"
        )
    else:
        reach = settings.bind
    return f"""
Relay demo is running (Ctrl-C stops it).
  listening on     {reach}
  inference plane  http://{host}:{settings.port}   (try: curl http://{host}:{settings.port}/healthz)
  control plane    {control}/api   (OpenAPI: {control}/api/openapi.json)
  dashboard        {control}/ui/   (sign in with the admin token, or demo@relay.local / demo-password)
  fake upstream    {upstream}
  database         {settings.database_url}
  demo catalog     {catalog}
  admin token      {where}

Point the relay CLI here (from another terminal in this directory):
  export RELAY_URL=http://{host}:{settings.port} RELAY_CONTROL_URL={control}
Try the control API:
  curl -H "Authorization: Bearer $(cat {token})" {control}/api/models
  RELAY_CONTROL_URL={control} {relay_command()} export
"""


def usage_banner(settings: Settings, key: str, token: str) -> str:
    base = f"http://{local_host(settings.bind)}:{settings.port}"
    return f"""A relay key for the demo service account (kept in {settings.data_dir}/demo.key):
  export RELAY_API_KEY={key}
  curl -H "Authorization: Bearer $RELAY_API_KEY" {base}/v1/models
  curl -H "Authorization: Bearer $RELAY_API_KEY" {base}/v1/chat/completions \\
    -d '{{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": "hello"}}]}}'
  curl -H "x-api-key: $RELAY_API_KEY" {base}/anthropic/v1/messages \\
    -d '{{"model": "claude-haiku", "max_tokens": 64, "messages": [{{"role": "user", "content": "hello"}}]}}'
  curl -H "Authorization: Bearer $RELAY_API_KEY" {base}/v1/generate \\
    -d '{{"model": "claude-haiku", "messages": [{{"role": "user", "content": "hello"}}], "stream": true}}'
A batch from the command line (JSONL, one request per line):
  echo '{{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": "hi"}}]}}' > requests.jsonl
  RELAY_URL={base} {relay_command()} batch submit requests.jsonl --shape openai --wait
With the official SDKs:
  OpenAI(base_url="{base}/openai/v1", api_key=os.environ["RELAY_API_KEY"])
  Anthropic(base_url="{base}/anthropic", api_key=os.environ["RELAY_API_KEY"])
An inference token for demo-user (valid 1 h; works wherever the key does):
  {token}
"""


async def run_demo(settings: Settings, upstream_port: int) -> None:
    proc, upstream = await _start_fake_upstream(upstream_port)

    async def ready(runtime: Runtime) -> None:
        documents = demo_documents(upstream)
        plan = await runtime.applier.apply(documents, dry_run=True, prune=False)
        missing = {(s["kind"], s["name"]) for s in plan if s["action"] == "create"}
        if missing:
            todo = [d for d in documents if (d["kind"], d["name"]) in missing]
            await runtime.applier.apply(todo, dry_run=False, prune=False)
        key, token = await demo_credentials(runtime, Path(settings.data_dir))
        print(banner(settings, runtime, upstream, catalog_line(plan, len(missing))), flush=True)
        print(usage_banner(settings, key, token), flush=True)

    try:
        await serve(settings, on_ready=ready)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 5)
