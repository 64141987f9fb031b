"""``relay demo``: Relay on embedded SQLite with the fake upstream and a demo catalog.

The one place a newcomer starts: it must show everything working with no setup. It starts the fake
upstream as a child process, serves Relay in this process, applies ``catalog.yaml`` through the same
apply service the control API uses, and prints how to reach everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from importlib import resources
from pathlib import Path

import yaml

from relay.boot import Runtime
from relay.config import Settings
from relay.domain.credentials import hash_key
from relay.serve import serve


def demo_documents(upstream_base_url: str) -> list[dict[str, object]]:
    text = resources.files("relay.demo").joinpath("catalog.yaml").read_text()
    return [d for d in yaml.safe_load_all(text.replace("${UPSTREAM}", upstream_base_url)) if d]


async def _start_fake_upstream(port: int) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relay.fake_upstream",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if not line:
        raise OSError(f"the fake upstream did not start (is port {port} free? try --upstream-port)")
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


def banner(settings: Settings, runtime: Runtime, upstream: str, objects: int, written: int) -> str:
    host = "127.0.0.1" if settings.bind in ("0.0.0.0", "::") else settings.bind
    control = f"http://{host}:{settings.control_port}"
    token = runtime.secrets.admin_token_path or "$RELAY_ADMIN_TOKEN"
    return f"""
Relay demo is running (Ctrl-C stops it).
  inference plane  http://{host}:{settings.port}   (try: curl http://{host}:{settings.port}/healthz)
  control plane    {control}/api   (OpenAPI: {control}/api/openapi.json)
  dashboard        {control}/ui/   (sign in with the admin token, or demo@relay.local / demo-password)
  fake upstream    {upstream}
  database         {settings.database_url}
  demo catalog     {objects} objects ({written} written this start)
  admin token      in {token}

Try the control API:
  curl -H "Authorization: Bearer $(cat {token})" {control}/api/models
  .venv/bin/relay export
"""


def usage_banner(settings: Settings, key: str, token: str) -> str:
    base = f"http://127.0.0.1:{settings.port}"
    return f"""A relay key for the demo service account (kept in {settings.data_dir}/demo.key):
  export RELAY_API_KEY={key}
  curl -H "Authorization: Bearer $RELAY_API_KEY" {base}/v1/models
  curl -H "Authorization: Bearer $RELAY_API_KEY" {base}/v1/chat/completions \\
    -d '{{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": "hello"}}]}}'
  curl -H "x-api-key: $RELAY_API_KEY" {base}/anthropic/v1/messages \\
    -d '{{"model": "claude-haiku", "max_tokens": 64, "messages": [{{"role": "user", "content": "hello"}}]}}'
  curl -H "Authorization: Bearer $RELAY_API_KEY" {base}/v1/generate \\
    -d '{{"model": "claude-haiku", "messages": [{{"role": "user", "content": "hello"}}], "stream": true}}'
With the official SDKs:
  OpenAI(base_url="{base}/openai/v1", api_key=os.environ["RELAY_API_KEY"])
  Anthropic(base_url="{base}/anthropic", api_key=os.environ["RELAY_API_KEY"])
An inference token for demo-user (valid 1 h; works wherever the key does):
  {token}
"""


async def run_demo(settings: Settings, upstream_port: int) -> None:
    proc, upstream = await _start_fake_upstream(upstream_port)

    async def ready(runtime: Runtime) -> None:
        plan = await runtime.applier.apply(demo_documents(upstream), dry_run=False, prune=False)
        written = sum(1 for step in plan if step["action"] != "unchanged")
        key, token = await demo_credentials(runtime, Path(settings.data_dir))
        print(banner(settings, runtime, upstream, len(plan), written), flush=True)
        print(usage_banner(settings, key, token), flush=True)

    try:
        await serve(settings, on_ready=ready)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 5)
