"""Every refusal of the batch API (SPEC §10) carries ``code``, as the live plane's errors do, so a
client branches on one field whichever API answered. In process: a real runtime (``boot``'s
composition) on SQLite, its inference app over httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.runtime import Planes, running


@pytest.fixture
async def relay(tmp_path: Path) -> AsyncIterator[tuple[Planes, dict[str, str]]]:
    async with running(tmp_path) as planes:
        key = await planes.relay_key()
        yield planes, {"Authorization": f"Bearer {key}"}


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code", "says"),
    [
        ("POST", "/v1/batches", b"[1]", 400, "invalid_request", ""),
        ("POST", "/v1/batches", {"requests": [CHAT]}, 400, "invalid_request", "shape"),
        ("POST", "/v1/batches", {"shape": "canonical", "requests": [CHAT]}, 400, "invalid_request", "shape"),
        ("POST", "/v1/batches", {"shape": "openai", "requests": []}, 400, "invalid_request", "requests"),
        (
            "POST",
            "/v1/batches",
            {"shape": "openai", "requests": [CHAT, {**CHAT, "stream": True}]},
            400,
            "invalid_request",
            "requests[1]",
        ),
        ("GET", "/v1/batches?limit=0", None, 400, "invalid_request", "limit"),
        ("GET", "/v1/batches/b_nope", None, 404, "not_found", "batch not found"),
        ("GET", "/v1/batches/b_nope/results", None, 404, "not_found", "batch not found"),
        ("POST", "/v1/batches/b_nope/cancel", None, 404, "not_found", "batch not found"),
        ("DELETE", "/v1/batches", None, 405, "method_not_allowed", ""),
    ],
)
async def test_every_refusal_carries_a_code(
    relay: tuple[Planes, dict[str, str]],
    method: str,
    path: str,
    body: Any,
    status: int,
    code: str,
    says: str,
) -> None:
    planes, auth = relay
    content = body if isinstance(body, bytes) else None
    answer = await planes.inference.request(
        method, path, headers=auth, content=content, json=None if content is not None else body
    )
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == code, error
    assert error["type"] in ("invalid_request_error", "not_found_error"), error
    assert says in error["message"], error


async def test_a_refused_submission_still_writes_nothing(relay: tuple[Planes, dict[str, str]]) -> None:
    planes, auth = relay
    refused = await planes.inference.post(
        "/v1/batches", headers=auth, json={"shape": "openai", "requests": [{"stream": True}]}
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    listed = await planes.inference.get("/v1/batches", headers=auth)
    assert listed.json()["batches"] == []
