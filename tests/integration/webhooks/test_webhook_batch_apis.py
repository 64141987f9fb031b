"""Completion webhooks of the §14 (OpenAI) and §15 (Anthropic) batch APIs, end to end (SPEC §10.10):
a real ``relay serve`` per backend, the real loopback receiver, every event's signature verified.

Each finished batch sends exactly one event of its end state (``batch.completed``, ``batch.cancelled``,
``batch.failed``, ``batch.expired``) with ``data.api`` naming its API, its project's id and the item
counts the engine's own view shows. A §14 event is sent only once the batch's end state (and its output
file) exists: the receiver is waited on first, then one read must already show it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update

from relay.store import tables as t
from tests.fixtures.live import Gateway
from tests.integration.message_batches import helpers as mb
from tests.integration.openai_batches import helpers as oa
from tests.integration.webhooks.helpers import new_webhook, own_project
from tests.integration.webhooks.receiver import Receiver, verify

SETTLE_S = 1.5  # long enough for a second (wrong) delivery to show up: the schedule is scaled 1000×
CHAT = "/v1/chat/completions"


class Subscribed:
    """One test's project, relay key, webhook (every event type) and receiver path."""

    def __init__(self, gw: Gateway, receiver: Receiver) -> None:
        self.gw, self.receiver = gw, receiver
        self.project, self.key = own_project(gw)
        self.project_id = gw.get("projects", self.project)["id"]
        self.path = receiver.path()
        self.secret = new_webhook(gw, receiver.url(self.path), project=self.project)["secret"]

    def event(self) -> dict[str, Any]:
        """The first event received, its signature verified (fails if none arrives)."""
        got = self.receiver.wait(self.path, 1, timeout=30)
        assert got, "no webhook event arrived"
        assert verify(self.secret, got[0].headers, got[0].body)
        body: dict[str, Any] = got[0].json()
        assert got[0].headers["webhook-id"] == body["id"] and body["id"].startswith("evt_")
        return body

    def native_counts(self, batch_id: str) -> dict[str, int]:
        """The engine's item counts of the batch, from the §10 view (which serves every API's ids)."""
        response = self.gw.client.get(f"/v1/batches/{batch_id}", headers=self.gw.auth(self.key))
        assert response.status_code == 200, response.text
        assert response.json()["CompletedAt"] is not None
        return dict(response.json()["counts"])

    def assert_event(self, body: dict[str, Any], batch_id: str, api: str, event_type: str) -> None:
        assert body == {
            "id": body["id"],
            "type": event_type,
            "created_at": body["created_at"],
            "data": {
                "id": batch_id,
                "api": api,
                "project_id": self.project_id,
                "counts": self.native_counts(batch_id),
            },
        }
        assert self.key not in str(body)

    def assert_only_one(self) -> None:
        time.sleep(SETTLE_S)
        assert len(self.receiver.received(self.path)) == 1  # one event per batch, delivered once


# §14 OpenAI Batches


def _slow_lines(n: int, latency_ms: int) -> list[dict[str, Any]]:
    return [oa.line(f"s{i}", CHAT, oa.body_for(CHAT, i, fake={"latency_ms": latency_ms})) for i in range(n)]


def _openai_view(h: Subscribed, batch_id: str) -> dict[str, Any]:
    response = oa.raw(h.gw, "GET", f"/batches/{batch_id}", h.key)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _wait_running(h: Subscribed, batch_id: str) -> None:
    deadline = time.monotonic() + 15
    while h.gw.client.get(f"/v1/batches/{batch_id}", headers=h.gw.auth(h.key)).json()["counts"].get(
        "running", 0
    ) == 0:  # fmt: skip
        assert time.monotonic() < deadline, "no item started"
        time.sleep(0.05)


def test_openai_completed_sends_one_event_after_its_output_file(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = oa.sdk(hooked, h.key)
    lines = [oa.line("ok-0", CHAT, oa.body_for(CHAT, 0)), oa.line("ok-1", CHAT, oa.body_for(CHAT, 1))]
    lines.append(oa.line("bad", CHAT, oa.body_for(CHAT, 2, model="no-such-model")))
    created = oa.create(client, lines)

    body = h.event()  # waited on first: the batch is read only once the event is in
    shown = _openai_view(h, created.id)  # one read, no polling: the end state came before the event
    assert shown["status"] == "completed" and shown["output_file_id"] and shown["completed_at"]
    outputs = oa.file_lines(client, shown["output_file_id"])
    assert sorted(o["custom_id"] for o in outputs) == ["ok-0", "ok-1"]
    assert [e["custom_id"] for e in oa.file_lines(client, shown["error_file_id"])] == ["bad"]
    h.assert_event(body, created.id, "openai", "batch.completed")
    assert body["data"]["counts"] == {"completed": 2, "discarded": 1}
    assert shown["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    h.assert_only_one()


def test_openai_cancelled_sends_one_batch_cancelled(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = oa.sdk(hooked, h.key)
    created = oa.create(client, _slow_lines(20, 3000))
    _wait_running(h, created.id)
    assert client.batches.cancel(created.id).status == "cancelling"

    body = h.event()
    shown = _openai_view(h, created.id)
    assert shown["status"] == "cancelled" and shown["error_file_id"]
    assert oa.file_lines(client, shown["error_file_id"])  # the cancelled lines are readable
    h.assert_event(body, created.id, "openai", "batch.cancelled")
    counts = body["data"]["counts"]
    assert sum(counts.values()) == 20 and counts.get("cancelled", 0) > 0
    assert shown["request_counts"]["completed"] == counts.get("completed", 0)
    h.assert_only_one()


def test_openai_failed_validation_sends_one_batch_failed(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = oa.sdk(hooked, h.key)
    file_id = oa.upload(client, b"not json\n")
    created = client.batches.create(input_file_id=file_id, endpoint=CHAT, completion_window="24h")

    body = h.event()
    assert _openai_view(h, created.id)["status"] == "failed"
    h.assert_event(body, created.id, "openai", "batch.failed")
    assert body["data"]["counts"] == {}  # no item was created
    h.assert_only_one()


def test_openai_past_expires_at_sends_one_batch_expired(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = oa.sdk(hooked, h.key)
    created = oa.create(client, _slow_lines(20, 4000))
    _wait_running(h, created.id)
    past = datetime.now(UTC) - timedelta(seconds=1)
    hooked.sql(update(t.batches).where(t.batches.c.id == created.id).values(expires_at=past))

    body = h.event()
    shown = _openai_view(h, created.id)
    assert shown["status"] == "expired" and shown["expired_at"] and shown["error_file_id"]
    errors = oa.file_lines(client, shown["error_file_id"])
    assert errors and {e["error"]["code"] for e in errors} <= {"batch_expired", "batch_cancelled"}
    h.assert_event(body, created.id, "openai", "batch.expired")
    assert sum(body["data"]["counts"].values()) == 20 and body["data"]["counts"].get("cancelled", 0) > 0
    h.assert_only_one()


# §15 Anthropic Message Batches


def test_anthropic_ended_sends_one_batch_completed(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = mb.sdk(hooked, h.key)
    requests = [mb.request("a", 0), mb.request("b", 1), mb.request("c", 2, model="no-such-model")]
    created = client.messages.batches.create(requests=requests)  # type: ignore[arg-type]

    body = h.event()
    ended = client.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended"
    h.assert_event(body, created.id, "anthropic", "batch.completed")
    counts = body["data"]["counts"]
    assert counts.get("completed", 0) == ended.request_counts.succeeded == 2
    assert sum(counts.values()) == 3 and ended.request_counts.errored == 1
    h.assert_only_one()


def test_anthropic_cancelled_sends_one_batch_cancelled(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = mb.sdk(hooked, h.key)
    created = client.messages.batches.create(requests=[mb.slow(f"s{i}") for i in range(10)])  # type: ignore[misc]
    assert client.messages.batches.cancel(created.id).processing_status == "canceling"

    body = h.event()
    ended = client.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.request_counts.canceled == 10
    h.assert_event(body, created.id, "anthropic", "batch.cancelled")
    assert body["data"]["counts"] == {"cancelled": 10}
    h.assert_only_one()


def test_anthropic_past_expires_at_sends_one_batch_expired(hooked: Gateway, receiver: Receiver) -> None:
    h = Subscribed(hooked, receiver)
    client = mb.sdk(hooked, h.key)
    created = client.messages.batches.create(requests=[mb.slow(f"late-{i}") for i in range(10)])  # type: ignore[misc]
    past = datetime.now(UTC) - timedelta(seconds=1)
    hooked.sql(update(t.batches).where(t.batches.c.id == created.id).values(expires_at=past))

    body = h.event()
    ended = client.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.request_counts.expired == 10
    h.assert_event(body, created.id, "anthropic", "batch.expired")
    assert body["data"]["counts"] == {"cancelled": 10}  # expired items are cancelled ones (`expired: …`)
    h.assert_only_one()
