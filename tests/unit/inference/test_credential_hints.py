"""Credentials in the wrong place are told so (SPEC §3.3 messages, with a hint): a relay key sent
without ``Bearer `` on the live and batch APIs, the admin token sent for inference, a relay key sent to
the control API. In process: a real runtime as ``boot`` builds it (so the admin token's hash reaches
the snapshot the way ``relay serve`` wires it), on SQLite, its apps over httpx's ASGI transport."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from relay.boot import Runtime, build_runtime
from relay.config import Settings

TOKEN = "hints-admin-token-0123456789"


@dataclass
class Planes:
    inference: httpx.AsyncClient
    control: httpx.AsyncClient
    key: str


@pytest.fixture
async def planes(tmp_path: Path) -> AsyncIterator[Planes]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'relay.db'}",
        data_dir=str(tmp_path / "data"),
        admin_token=TOKEN,
        master_key=base64.b64encode(bytes(range(32))).decode(),
        batch_workers=0,
        batch_payload_dir=str(tmp_path / "payloads"),
    )
    runtime: Runtime = build_runtime(settings)
    await runtime.start()
    try:
        inference = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=runtime.inference_app), base_url="http://relay:8080"
        )
        control = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=runtime.control_app),
            base_url="http://relay:8081",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        async with inference, control:
            key = await _a_relay_key(control)
            yield Planes(inference, control, key)
    finally:
        await runtime.stop()


async def _a_relay_key(control: httpx.AsyncClient) -> str:
    for plural, body in (
        ("teams", {"name": "t"}),
        ("policies", {"name": "p", "models": ["*"]}),
        ("projects", {"name": "prj", "team": "t", "default_policy": "p"}),
        ("service-accounts", {"name": "sa", "project": "prj"}),
    ):
        created = await control.post(f"/api/{plural}", json=body)
        assert created.status_code == 201, created.text
    made = await control.post("/api/keys", json={"principal_kind": "serviceaccount", "principal": "sa"})
    assert made.status_code == 201, made.text
    return str(made.json()["plaintext"])


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
CALLS = [
    ("POST", "/v1/chat/completions", CHAT),
    ("GET", "/v1/models", None),
    ("POST", "/v1/batches", {"shape": "openai", "requests": [CHAT]}),
    ("GET", "/v1/batches", None),
]


@pytest.mark.parametrize(("method", "path", "body"), CALLS)
async def test_a_key_without_bearer_is_told_the_scheme(
    planes: Planes, method: str, path: str, body: dict | None
) -> None:
    answer = await planes.inference.request(method, path, json=body, headers={"Authorization": planes.key})
    assert answer.status_code == 401, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unauthenticated"
    assert error["message"].startswith("missing credential: the Authorization header must read 'Bearer ")
    assert planes.key not in answer.text
    fine = await planes.inference.request(
        method, path, json=body, headers={"Authorization": f"Bearer {planes.key}"}
    )
    assert fine.status_code != 401, fine.text


@pytest.mark.parametrize(("method", "path", "body"), CALLS)
async def test_the_admin_token_for_inference_says_what_it_is(
    planes: Planes, method: str, path: str, body: dict | None
) -> None:
    answer = await planes.inference.request(
        method, path, json=body, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 401, answer.text
    message = answer.json()["error"]["message"]
    assert message.startswith("invalid api key: this is the admin token (RELAY_ADMIN_TOKEN)"), message
    assert TOKEN not in answer.text
    other = await planes.inference.request(
        method, path, json=body, headers={"Authorization": "Bearer sk-relay-unknown"}
    )
    assert other.json()["error"]["message"] == "invalid api key"


async def test_a_relay_key_on_the_control_api_says_what_it_is(planes: Planes) -> None:
    answer = await planes.control.get("/api/teams", headers={"Authorization": f"Bearer {planes.key}"})
    assert answer.status_code == 401
    assert answer.json()["error"]["message"].startswith("invalid admin token: this is a relay key")
    assert planes.key not in answer.text
    wrong = await planes.control.get("/api/teams", headers={"Authorization": "Bearer not-the-token"})
    assert wrong.json()["error"]["message"] == "invalid admin token"
