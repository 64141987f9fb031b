"""A traced relay in process (``tests.fixtures.runtime.running``) over the real fake upstream, its spans
sent to a real OTLP/HTTP receiver (``tests.fixtures.otlp``), and a catalog that shows every kind of
attempt: each adapter, a key that fails over, a model that falls back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.otlp import OtlpReceiver, ReceivedSpan
from tests.fixtures.runtime import Planes, running

SECRET_HOST_KEY = "sk-upstream-secret-0123456789"


@dataclass
class Traced:
    planes: Planes
    receiver: OtlpReceiver
    relay_key: str
    control_writes: int  # how many control-plane writes built the catalog (each a server span)

    async def post(self, path: str, body: dict[str, Any], **headers: str) -> Any:
        return await self.planes.inference.post(
            path, json=body, headers={"authorization": f"Bearer {self.relay_key}", **headers}
        )

    def request_trace(self, request_id: str) -> list[ReceivedSpan]:
        """The spans of the trace whose server span has ``relay.request_id`` = ``request_id``, once its
        server span and every attempt have arrived (the server span ends last)."""
        spans = self.receiver.wait_for(
            lambda got: any(s.attributes.get("relay.request_id") == request_id for s in got)
        )
        server = next(s for s in spans if s.attributes.get("relay.request_id") == request_id)
        return self.receiver.trace(server.trace_id)


def server_and_attempts(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    servers = [s for s in spans if s.kind == "SERVER"]
    assert len(servers) == 1, [(s.name, s.kind) for s in spans]
    attempts = sorted((s for s in spans if s.kind == "CLIENT"), key=lambda s: s.attributes["relay.attempt"])
    assert all(a.parent_span_id == servers[0].span_id for a in attempts)
    return servers[0], attempts


async def build_catalog(planes: Planes, fake: FakeUpstream) -> tuple[str, int]:
    """Hosts ``ok`` (one good key, its value a secret-looking string), ``flaky`` (a key answering 500,
    then a good one) and ``dead`` (only a 503 key); models ``chat`` / ``anth`` / ``resp`` on ``ok`` with
    the openai, anthropic and openai_responses adapters, ``flaky`` and ``dead`` (falling back to
    ``chat``); a relay key whose policy grants them all."""
    writes = 0

    async def create(plural: str, body: dict[str, Any]) -> None:
        nonlocal writes
        writes += 1
        await planes.create(plural, body)

    keys = {"ok": [SECRET_HOST_KEY], "flaky": ["fail-500-a", "ok-b"], "dead": ["fail-503-c"]}
    names: list[str] = []
    for host, values in keys.items():
        await create("hosts", {"name": host, "base_url": fake.base_url})
        for n, value in enumerate(values):
            name = f"{host}-k{n}"
            await create("host-keys", {"name": name, "host": host, "value": value})
            names.append(name)
    models = {
        "chat": ("ok", "openai"),
        "anth": ("ok", "anthropic"),
        "resp": ("ok", "openai_responses"),
        "flaky": ("flaky", "openai"),
        "dead": ("dead", "openai"),
    }
    for model, (host, adapter) in models.items():
        provider = "anthropic" if adapter == "anthropic" else "openai"
        await create("models", {"name": model, "provider": provider})
        binding = {"name": f"{model}-b", "model": model, "host": host, "adapter": adapter}
        await create("bindings", {**binding, "upstream_name": f"up-{model}"})
    await create("teams", {"name": "t"})
    policy = {"name": "p", "models": ["*"], "host_keys": names, "fallbacks": {"dead": ["chat"]}}
    await create("policies", policy)
    await create("projects", {"name": "proj", "team": "t", "default_policy": "p"})
    await create("service-accounts", {"name": "sa", "project": "proj"})
    body = {"principal_kind": "serviceaccount", "principal": "sa"}
    made = await planes.control.post("/api/keys", json=body)
    assert made.status_code == 201, made.text
    return str(made.json()["plaintext"]), writes + 1


@asynccontextmanager
async def traced(
    tmp_path: Path, fake: FakeUpstream, receiver: OtlpReceiver, **settings: Any
) -> AsyncIterator[Traced]:
    settings.setdefault("otel_endpoint", receiver.endpoint)
    async with running(tmp_path, **settings) as planes:
        key, writes = await build_catalog(planes, fake)
        yield Traced(planes, receiver, key, writes)
