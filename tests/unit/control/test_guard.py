"""The control plane's front door (relay.control.guard): an inference or batch call sent to the control
port is told where the inference plane is (404 ``wrong_plane``), as JSON and as the official SDKs show
it, instead of a bare "Not Found". In process: a real runtime on SQLite, its control app over httpx's
ASGI transport."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai
import pytest

from relay.boot import build_runtime
from relay.config import Settings

TOKEN = "guard-admin-token-0123456789"
INFERENCE_PORT = 18080


@pytest.fixture
async def control_app(tmp_path: Path) -> AsyncIterator[object]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'relay.db'}",
        data_dir=str(tmp_path / "data"),
        admin_token=TOKEN,
        master_key=base64.b64encode(bytes(range(32))).decode(),
        port=INFERENCE_PORT,
        batch_workers=0,
    )
    runtime = build_runtime(settings)
    await runtime.start()
    try:
        yield runtime.control_app
    finally:
        await runtime.stop()


def _client(app: object, base_url: str = "http://relay.internal:8081") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/messages"),
        ("GET", "/v1/models"),
        ("POST", "/v1/batches"),
        ("GET", "/openai/v1/files"),
        ("POST", "/anthropic/v1/messages/batches"),
        ("GET", "/v1"),
    ],
)
async def test_an_inference_path_says_where_the_inference_plane_is(
    control_app: object, method: str, path: str
) -> None:
    async with _client(control_app) as client:
        answer = await client.request(method, path, headers={"Authorization": "Bearer sk-relay-x"}, json={})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "wrong_plane"
    assert "this is Relay's control plane" in error["message"]
    assert f"http://relay.internal:{INFERENCE_PORT}{path}" in error["message"]
    assert "RELAY_PORT" in error["message"]


async def test_a_hostile_host_header_is_not_echoed(control_app: object) -> None:
    async with _client(control_app) as client:
        answer = await client.get("/v1/models", headers={"Host": "evil<script>:1"})
    message = answer.json()["error"]["message"]
    assert answer.json()["error"]["code"] == "wrong_plane" and "<script>" not in message
    assert f"port {INFERENCE_PORT}/v1/models" in message


async def test_control_routes_and_unknown_paths_are_unchanged(control_app: object) -> None:
    async with _client(control_app) as client:
        teams = await client.get("/api/teams", headers={"Authorization": f"Bearer {TOKEN}"})
        unknown = await client.get("/nowhere")
    assert teams.status_code == 200
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


async def test_the_sdks_show_the_sentence(control_app: object) -> None:
    async with _client(control_app) as http:
        oai = openai.AsyncOpenAI(
            base_url="http://relay.internal:8081/v1", api_key="sk-relay-x", http_client=http, max_retries=0
        )
        with pytest.raises(openai.NotFoundError) as raised:
            await oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert "this is Relay's control plane" in str(raised.value)
        assert raised.value.code == "wrong_plane"
    transport = httpx2.ASGITransport(app=control_app)  # type: ignore[arg-type]
    async with httpx2.AsyncClient(transport=transport) as http2:
        ant = anthropic.AsyncAnthropic(
            base_url="http://relay.internal:8081", api_key="sk-relay-x", http_client=http2, max_retries=0
        )
        with pytest.raises(anthropic.NotFoundError) as refused:
            await ant.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert "this is Relay's control plane" in str(refused.value)
