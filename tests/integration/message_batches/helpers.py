"""Calls and waits shared by the Message Batches tests: the official ``anthropic`` SDK pointed at a
relay, raw HTTP for what the SDK hides, and the database for moving a batch's ``expires_at`` back."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
from anthropic.types.messages import MessageBatch

from tests.fixtures.live import MESSAGES_MODEL, Gateway

PATH = "/anthropic/v1/messages/batches"
NOT_FOUND = {"type": "error", "error": {"type": "not_found_error", "message": "batch not found"}}


def sdk(gw: Gateway, key: str | None = None) -> anthropic.Anthropic:
    """The official client as a user points it at Relay: ``base_url`` and ``api_key`` (``x-api-key``)."""
    return anthropic.Anthropic(base_url=f"{gw.url}/anthropic", api_key=key or gw.key, max_retries=0)


def params(n: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "model": MESSAGES_MODEL,
        "max_tokens": 32,
        "messages": [{"role": "user", "content": f"request {n}"}],
        **extra,
    }


def request(custom_id: str, n: int = 0, **extra: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "params": params(n, **extra)}


def slow(custom_id: str, latency_ms: int = 30_000) -> dict[str, Any]:
    """A request the fake upstream answers only after ``latency_ms`` (to cancel or expire it)."""
    return request(custom_id, fake={"latency_ms": latency_ms})


def counted(batch: MessageBatch) -> int:
    c = batch.request_counts
    return c.processing + c.succeeded + c.errored + c.canceled + c.expired


def wait_ended(client: anthropic.Anthropic, batch_id: str, total: int, timeout: float = 30.0) -> MessageBatch:
    """Poll until the batch ends; every poll's ``request_counts`` must sum to ``total`` (SPEC §15)."""
    deadline = time.monotonic() + timeout
    while True:
        batch = client.messages.batches.retrieve(batch_id)
        assert counted(batch) == total, batch
        if batch.processing_status == "ended":
            return batch
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} did not end: {batch}")
        time.sleep(0.1)


def raw(gw: Gateway, method: str, path: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
    """A call with ``x-api-key`` (Anthropic's header); pass ``headers`` to send others instead."""
    headers = kwargs.pop("headers") if "headers" in kwargs else {"x-api-key": key or gw.key}
    return gw.client.request(method, path, headers=headers, **kwargs)


def jsonl(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-jsonl"
    return [json.loads(line) for line in response.text.splitlines() if line]


def usage_events(gw: Gateway, batch_id: str, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        response = gw.relay.api("GET", f"/api/usage/events?source=batch&batch_id={batch_id}&limit=1000")
        assert response.status_code == 200, response.text
        events = list(response.json()["events"])
        if len(events) >= count or time.monotonic() > deadline:
            return events
        time.sleep(0.1)
