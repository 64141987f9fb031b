"""Credentials in the wrong place are told so (SPEC §3.3 messages, with a hint): a relay key sent
without ``Bearer `` on the live and batch APIs, the admin token sent for inference, a relay key sent to
the control API. In process: a real runtime as ``boot`` builds it (so the admin token's hash reaches
the snapshot the way ``relay serve`` wires it), on SQLite, its apps over httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fixtures.runtime import ADMIN_TOKEN as TOKEN
from tests.fixtures.runtime import running


@dataclass
class Planes:
    inference: httpx.AsyncClient
    control: httpx.AsyncClient
    key: str


@pytest.fixture
async def planes(tmp_path: Path) -> AsyncIterator[Planes]:
    async with running(tmp_path) as relay:
        yield Planes(relay.inference, relay.control, await relay.relay_key())


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
