"""Calls and checks shared by the OpenAI Batches tests: an SDK client, JSONL files, waiting for a
batch to end, reading its output and error files."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from openai import OpenAI
from openai.types import Batch

from tests.fixtures.live import CHAT_MODEL, EMBED_MODEL, RESPONSES_MODEL, Gateway, uniq

ENDED = ("completed", "failed", "expired", "cancelled")
NOT_FOUND = {"error": {"type": "invalid_request_error", "code": "not_found", "message": "batch not found"}}
BATCH_FIELDS = {
    "id", "object", "endpoint", "errors", "input_file_id", "completion_window", "status", "output_file_id",
    "error_file_id", "created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at",
    "failed_at", "expired_at", "cancelling_at", "cancelled_at", "request_counts", "metadata", "usage",
}  # fmt: skip


def sdk(gw: Gateway, credential: str | None = None) -> OpenAI:
    return OpenAI(base_url=gw.url + "/openai/v1", api_key=credential or gw.key, max_retries=0)


def body_for(endpoint: str, n: int, **extra: Any) -> dict[str, Any]:
    if endpoint == "/v1/chat/completions":
        return {"model": CHAT_MODEL, "messages": [{"role": "user", "content": f"item {n}"}], **extra}
    if endpoint == "/v1/responses":
        return {"model": RESPONSES_MODEL, "input": f"item {n}", **extra}
    return {"model": EMBED_MODEL, "input": f"item {n}", **extra}


def line(custom_id: str, endpoint: str, body: Any, method: str = "POST") -> dict[str, Any]:
    return {"custom_id": custom_id, "method": method, "url": endpoint, "body": body}


def jsonl(lines: list[Any]) -> bytes:
    return b"".join(json.dumps(item).encode() + b"\n" for item in lines)


def upload(client: OpenAI, content: bytes) -> str:
    return client.files.create(file=("requests.jsonl", content), purpose="batch").id


def create(client: OpenAI, lines: list[Any], endpoint: str = "/v1/chat/completions", **extra: Any) -> Batch:
    file_id = upload(client, jsonl(lines))
    return client.batches.create(
        input_file_id=file_id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
        **extra,
    )


def wait_ended(client: OpenAI, batch_id: str, timeout: float = 30.0) -> Batch:
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ENDED:
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} did not end: {batch.status} {batch.request_counts}")
        time.sleep(0.1)


def file_lines(client: OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(text) for text in client.files.content(file_id).text.splitlines()]


def raw(gw: Gateway, method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
    return gw.client.request(method, "/openai/v1" + path, headers=gw.auth(key), **kwargs)


def new_user(gw: Gateway) -> str:
    name = uniq("ou")
    doc = {
        "kind": "User",
        "name": name,
        "spec": {"email": f"{name}@example.com", "memberships": [{"project": gw.project}]},
    }
    gw.control_write("POST", "/api/apply", {"documents": [doc]}, 200)
    return gw.object_id("users", name)


def token(gw: Gateway, user_id: str) -> str:
    return str(
        gw.control_write("POST", f"/api/users/{user_id}/tokens", {"project": gw.project}, 201).json()["token"]
    )
