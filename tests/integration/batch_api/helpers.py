"""Calls and waits shared by the batch API tests."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.fixtures.live import CHAT_MODEL, Gateway


def chat_item(n: int = 0, model: str = CHAT_MODEL, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": f"item {n}"}], **extra}


def submit(gw: Gateway, shape: str, requests: list[Any], key: str | None = None) -> str:
    response = gw.post("/v1/batches", {"shape": shape, "requests": requests}, key=key)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body == {"id": body["id"], "status": "queued", "total_items": len(requests)}
    return str(body["id"])


def status(gw: Gateway, batch_id: str, key: str | None = None) -> dict[str, Any]:
    response = gw.client.get(f"/v1/batches/{batch_id}", headers=gw.auth(key))
    assert response.status_code == 200, response.text
    return dict(response.json())


def wait_finished(
    gw: Gateway, batch_id: str, key: str | None = None, timeout: float = 30.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = status(gw, batch_id, key)
        if view["CompletedAt"] is not None:
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} did not finish: {view['counts']}")
        time.sleep(0.1)


def results(gw: Gateway, batch_id: str, key: str | None = None, jsonl: bool = False) -> list[dict[str, Any]]:
    params = {"format": "jsonl"} if jsonl else None
    response = gw.client.get(f"/v1/batches/{batch_id}/results", headers=gw.auth(key), params=params)
    assert response.status_code == 200, response.text
    if jsonl:
        assert response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in response.text.splitlines() if line]
    body = response.json()
    assert set(body) == {"results"}
    return list(body["results"])


def batch_events(gw: Gateway, batch_id: str) -> list[dict[str, Any]]:
    response = gw.relay.api("GET", f"/api/usage/events?source=batch&batch_id={batch_id}&limit=1000")
    assert response.status_code == 200, response.text
    return list(response.json()["events"])


def wait_events(gw: Gateway, batch_id: str, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        events = batch_events(gw, batch_id)
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.1)


def not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, response.text
    assert response.json()["error"]["message"] == "batch not found"


def item_events(gw: Gateway, batch_id: str, count: int, timeout: float = 30.0) -> dict[int, dict[str, Any]]:
    """The batch's usage events by idx, once all ``count`` are written; exactly one per item (SPEC §10.8).
    Also the way to wait for a batch whose submitter can no longer read it."""
    events = wait_events(gw, batch_id, count, timeout)
    by_idx = {e["batch_idx"]: e for e in events}
    assert len(events) == count and sorted(by_idx) == list(range(count)), events
    assert all(e["source"] == "batch" and e["batch_id"] == batch_id for e in events)
    return by_idx


def assert_failed_event(event: dict[str, Any], error: str, kind: str, status: int = 0) -> None:
    """A discarded item's event: its error kind, the item's error text, nothing priced."""
    assert event["error_kind"] == kind, event
    assert event["error_message"] == error, event
    assert event["status"] == status, event
    assert event["cost_nanos"] is None, event


def mint_token(gw: Gateway, user: str, project: str, ttl_seconds: int | None = None) -> dict[str, Any]:
    """``{"token", "jti", "expires_at"}`` of a new inference token of ``user`` in ``project``."""
    body: dict[str, Any] = {"project": project}
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds
    return dict(gw.control_write("POST", f"/api/users/{user}/tokens", body, 201).json())
