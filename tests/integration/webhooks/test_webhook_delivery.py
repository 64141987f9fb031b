"""Completion webhooks delivered to a real receiver (SPEC §10.10, §12): the signed body of a finished §10
batch, exactly one event per batch (completed and cancelled), project and event-type filters, retries
with the same ``webhook-id`` until acknowledged, a hanging receiver bounded by the attempt timeout, the
deliveries listing and the metrics. One relay per backend (SQLite and Postgres)."""

from __future__ import annotations

import base64
import time

from tests.fixtures.live import Gateway, metric_value
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished
from tests.integration.webhooks.helpers import deliveries, new_webhook, own_project, wait_deliveries
from tests.integration.webhooks.receiver import Receiver, verify

SETTLE_S = 1.5  # long enough for a second (wrong) delivery to show up: the schedule is scaled 1000×


def test_a_finished_batch_sends_one_signed_event(hooked: Gateway, receiver: Receiver) -> None:
    project, key = own_project(hooked)
    path = receiver.path()
    hook = new_webhook(hooked, receiver.url(path), project=project)
    batch_id = submit(hooked, "openai", [chat_item(0), chat_item(1, model="no-such-model")], key=key)
    wait_finished(hooked, batch_id, key=key)

    [got] = receiver.wait(path, 1)
    assert verify(hook["secret"], got.headers, got.body)
    assert not verify("whsec_" + base64.b64encode(bytes(32)).decode(), got.headers, got.body)  # can fail
    body = got.json()
    project_id = hooked.get("projects", project)["id"]
    assert body == {
        "id": body["id"],
        "type": "batch.completed",
        "created_at": body["created_at"],
        "data": {
            "id": batch_id,
            "api": "relay",
            "project_id": project_id,
            "counts": {"completed": 1, "discarded": 1},
        },
    }
    assert body["id"].startswith("evt_") and got.headers["webhook-id"] == body["id"]
    assert (
        isinstance(body["created_at"], int) and abs(int(got.headers["webhook-timestamp"]) - time.time()) < 300
    )
    # No credential of Relay's and no item body travel with it.
    assert not {"authorization", "x-api-key", "cookie"} & set(got.headers)
    assert key not in got.body.decode() and "item 0" not in got.body.decode()
    assert hook["secret"] not in str(got.headers)

    time.sleep(SETTLE_S)
    assert len(receiver.received(path)) == 1  # delivered once: no duplicate
    [attempt] = deliveries(hooked, hook["name"])
    assert attempt == {
        "id": attempt["id"],
        "event_id": body["id"],
        "type": "batch.completed",
        "attempt": 1,
        "status_code": 200,
        "latency_ms": attempt["latency_ms"],
        "error": None,
        "created_at": attempt["created_at"],
        "next_attempt_at": None,
    }
    assert metric_value(hooked.metrics(), "relay_webhook_deliveries_total", outcome="delivered") >= 1


def test_a_cancelled_batch_sends_batch_cancelled_once(hooked: Gateway, receiver: Receiver) -> None:
    project, key = own_project(hooked)
    every, completed_only = receiver.path(), receiver.path()
    hook = new_webhook(hooked, receiver.url(every), project=project)
    new_webhook(hooked, receiver.url(completed_only), project=project, events=["batch.completed"])
    batch_id = submit(hooked, "openai", [chat_item(i, fake={"latency_ms": 3000}) for i in range(30)], key=key)
    cancelled = hooked.post(f"/v1/batches/{batch_id}/cancel", key=key)
    assert cancelled.status_code == 200, cancelled.text
    assert hooked.post(f"/v1/batches/{batch_id}/cancel", key=key).status_code == 200  # idempotent
    view = wait_finished(hooked, batch_id, key=key)

    [got] = receiver.wait(every, 1)
    assert verify(hook["secret"], got.headers, got.body)
    body = got.json()
    assert body["type"] == "batch.cancelled" and body["data"]["id"] == batch_id
    assert body["data"]["counts"] == view["counts"] and sum(view["counts"].values()) == 30
    time.sleep(SETTLE_S)
    assert len(receiver.received(every)) == 1
    assert receiver.received(completed_only) == []  # subscribed to batch.completed only


def test_project_filter_and_every_project(hooked: Gateway, receiver: Receiver) -> None:
    mine, key = own_project(hooked)
    other, _ = own_project(hooked)
    to_mine, to_other, to_all = receiver.path(), receiver.path(), receiver.path()
    new_webhook(hooked, receiver.url(to_mine), project=mine)
    new_webhook(hooked, receiver.url(to_other), project=other)
    everyone = new_webhook(hooked, receiver.url(to_all))  # no project: every project's batches
    disabled = receiver.path()
    new_webhook(hooked, receiver.url(disabled), project=mine, enabled=False)
    try:
        batch_id = submit(hooked, "openai", [chat_item(0)], key=key)
        wait_finished(hooked, batch_id, key=key)
        [got] = receiver.wait(to_mine, 1)
        assert got.json()["data"]["id"] == batch_id
        assert batch_id in {r.json()["data"]["id"] for r in receiver.wait(to_all, 1)}
        time.sleep(SETTLE_S)
        assert receiver.received(to_other) == [] and receiver.received(disabled) == []
    finally:
        hooked.relay.api("DELETE", f"/api/webhooks/{everyone['name']}")


def test_retries_until_acknowledged_with_the_same_id(hooked: Gateway, receiver: Receiver) -> None:
    project, key = own_project(hooked)
    path = receiver.path(statuses=[500, 503, 404, 200])
    hook = new_webhook(hooked, receiver.url(path), project=project)
    before = metric_value(hooked.metrics(), "relay_webhook_deliveries_total", outcome="retrying")
    batch_id = submit(hooked, "openai", [chat_item(0)], key=key)
    wait_finished(hooked, batch_id, key=key)

    got = receiver.wait(path, 4)
    assert len(got) == 4
    assert len({r.headers["webhook-id"] for r in got}) == 1  # one event, the same id on every attempt
    assert len({r.body for r in got}) == 1  # and the same body
    assert all(verify(hook["secret"], r.headers, r.body) for r in got)
    attempts = wait_deliveries(hooked, hook["name"], 4)
    assert [a["attempt"] for a in attempts] == [4, 3, 2, 1]  # most recent first
    assert [a["status_code"] for a in attempts] == [200, 404, 503, 500]
    assert [a["error"] for a in attempts] == [
        None,
        "receiver answered 404",
        "receiver answered 503",
        "receiver answered 500",
    ]
    assert attempts[0]["next_attempt_at"] is None and all(a["next_attempt_at"] for a in attempts[1:])
    assert {a["event_id"] for a in attempts} == {got[0].headers["webhook-id"]}
    time.sleep(SETTLE_S)
    assert len(receiver.received(path)) == 4  # acknowledged: no fifth attempt
    assert [a["attempt"] for a in deliveries(hooked, hook["name"], limit=2)] == [4, 3]
    after = metric_value(hooked.metrics(), "relay_webhook_deliveries_total", outcome="retrying")
    assert after - before >= 3


def test_a_hanging_receiver_costs_one_slot_for_the_timeout(hooked: Gateway, receiver: Receiver) -> None:
    project, key = own_project(hooked)
    hanging, healthy = receiver.path(hang_s=20), receiver.path()
    stuck = new_webhook(hooked, receiver.url(hanging), project=project)
    new_webhook(hooked, receiver.url(healthy), project=project)
    try:
        batch_id = submit(hooked, "openai", [chat_item(0)], key=key)
        wait_finished(hooked, batch_id, key=key)
        assert len(receiver.wait(healthy, 1)) == 1  # delivered while the other receiver hangs
        # The hanging receiver's attempt ends at the 3 s timeout, is recorded, and is tried again.
        attempts = wait_deliveries(hooked, stuck["name"], 2, timeout=30)
        assert len(attempts) >= 2 and len(receiver.wait(hanging, 2)) >= 2
        for attempt in attempts:
            assert attempt["status_code"] is None
            assert attempt["error"] == "timeout: no answer within 3 s"
            assert 2900 <= attempt["latency_ms"] < 10_000
    finally:
        hooked.patch("webhooks", stuck["name"], {"enabled": False})  # pauses its deliveries


def test_deliveries_listing_refuses_bad_queries(hooked: Gateway) -> None:
    hook = new_webhook(hooked, "http://127.0.0.1:9/never", enabled=False)
    assert deliveries(hooked, hook["name"]) == [] and deliveries(hooked, hook["id"]) == []
    for params in ({"limit": "0"}, {"limit": "1001"}, {"limit": "x"}, {"since": "1"}):
        response = hooked.relay.control.get(f"/api/webhooks/{hook['name']}/deliveries", params=params)
        assert response.status_code == 400, response.text
        assert next(iter(params)) in response.json()["error"]["message"]
    missing = hooked.relay.control.get("/api/webhooks/no-such-hook/deliveries")
    assert missing.status_code == 404
    anonymous = hooked.relay.control.get(
        f"/api/webhooks/{hook['name']}/deliveries", headers={"Authorization": "Bearer wrong"}
    )
    assert anonymous.status_code == 401
    text = hooked.metrics()
    assert "relay_webhook_queue_depth" in text and "relay_webhook_oldest_pending_seconds" in text
