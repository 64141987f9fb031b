"""An operator's two nudges to a webhook (SPEC §16 with §10.10), through a real ``relay serve`` on
SQLite and Postgres and a real receiver: a test event and a redelivery go through the outbox like a
batch's event — signed with the webhook's secret, retried, listed among the deliveries, audited — from
the control API and from the dashboard's buttons alike."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
from sqlalchemy import func, select, update

from relay.store.webhook_tables import webhook_events
from tests.fixtures.live import Gateway
from tests.fixtures.relay_server import ADMIN_TOKEN
from tests.integration.webhooks.helpers import deliveries, new_webhook, wait_deliveries
from tests.integration.webhooks.receiver import Receiver, verify


def audited(gw: Gateway, action: str, webhook_id: str) -> list[dict[str, object]]:
    answer = gw.relay.control.get("/api/audit", params={"kind": "Webhook", "action": action})
    assert answer.status_code == 200, answer.text
    return [e for e in answer.json()["items"] if e["ref"] == webhook_id]


def test_a_test_event_is_signed_delivered_listed_and_audited(hooked: Gateway, receiver: Receiver) -> None:
    path = receiver.path()
    # Subscribed to batch.failed only: a test event is sent whatever the webhook's events.
    hook = new_webhook(hooked, receiver.url(path), events=["batch.failed"])
    queued = hooked.control_write("POST", f"/api/webhooks/{hook['name']}/test", None, 202).json()
    assert queued == {"event_id": queued["event_id"], "type": "webhook.test", "state": "pending"}

    [got] = receiver.wait(path, 1)
    assert verify(hook["secret"], got.headers, got.body)
    body = got.json()
    assert body == {
        "id": queued["event_id"],
        "type": "webhook.test",
        "created_at": body["created_at"],
        "data": {"webhook_id": hook["id"], "webhook": hook["name"]},
    }
    assert got.headers["webhook-id"] == queued["event_id"]
    [attempt] = wait_deliveries(hooked, hook["name"], 1)
    assert (attempt["event_id"], attempt["type"], attempt["status_code"]) == (
        queued["event_id"],
        "webhook.test",
        200,
    )
    [entry] = audited(hooked, "test", hook["id"])
    assert entry["after"] == {"event_id": queued["event_id"]}


def test_a_failed_event_is_redelivered_with_the_same_id_and_body(hooked: Gateway, receiver: Receiver) -> None:
    path = receiver.path(statuses=[500])  # every attempt fails…
    hook = new_webhook(hooked, receiver.url(path))
    event_id = hooked.control_write("POST", f"/api/webhooks/{hook['name']}/test", None, 202).json()[
        "event_id"
    ]
    receiver.wait(path, 1)
    # Still pending (retrying): a redelivery would change nothing, so it is refused.
    retrying = hooked.relay.api("POST", f"/api/webhooks/{hook['name']}/events/{event_id}/redeliver")
    assert retrying.status_code == 409 and "still pending" in retrying.json()["error"]["message"]
    # Failed for good, as after 24 h of attempts (here 86 s): written behind the deliverer's back.
    hooked.sql(
        update(webhook_events)
        .where(webhook_events.c.id == event_id)
        .values(state="failed", next_attempt_at=None, finished_at=datetime.now(UTC), claim_token=None)
    )
    first = receiver.received(path)[0]

    receiver.answer(path, [200])  # …until the receiver is fixed, and the operator redelivers
    seen = len(receiver.received(path))
    again = hooked.control_write("POST", f"/api/webhooks/{hook['id']}/events/{event_id}/redeliver", None, 202)
    assert again.json() == {"event_id": event_id, "type": "webhook.test", "state": "pending"}
    got = receiver.wait(path, seen + 1)[seen]
    assert got.body == first.body and got.headers["webhook-id"] == event_id  # the receiver dedupes by it
    assert verify(hook["secret"], got.headers, got.body)
    assert [e["after"] for e in audited(hooked, "redeliver", hook["id"])] == [{"event_id": event_id}]


def test_unknown_events_and_disabled_webhooks_are_refused_and_write_nothing(
    hooked: Gateway, receiver: Receiver
) -> None:
    path = receiver.path()
    hook = new_webhook(hooked, receiver.url(path))
    missing = hooked.relay.api("POST", f"/api/webhooks/{hook['name']}/events/evt_nope/redeliver")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert hooked.relay.api("POST", "/api/webhooks/no-such-hook/test").status_code == 404
    # Another webhook's event is not this one's to redeliver.
    other = new_webhook(hooked, receiver.url(receiver.path()))
    theirs = hooked.control_write("POST", f"/api/webhooks/{other['name']}/test", None, 202).json()["event_id"]
    crossed = hooked.relay.api("POST", f"/api/webhooks/{hook['name']}/events/{theirs}/redeliver")
    assert crossed.status_code == 404

    hooked.patch("webhooks", hook["name"], {"enabled": False})
    disabled = hooked.relay.api("POST", f"/api/webhooks/{hook['name']}/test")
    assert disabled.status_code == 409 and "disabled" in disabled.json()["error"]["message"]
    assert audited(hooked, "test", hook["id"]) == [] and deliveries(hooked, hook["name"]) == []
    mine = select(func.count()).select_from(webhook_events).where(webhook_events.c.webhook_id == hook["id"])
    assert hooked.sql(mine) == 0


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def test_the_dashboard_buttons_send_a_test_event_and_redeliver(hooked: Gateway, receiver: Receiver) -> None:
    path = receiver.path()
    hook = new_webhook(hooked, receiver.url(path))
    with httpx.Client(base_url=hooked.relay.control_url, timeout=30) as browser:
        signin = browser.get("/ui/signin").text
        assert (
            browser.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": _csrf(signin)}).status_code
            == 303
        )
        page = browser.get(f"/ui/webhooks/{hook['name']}")
        assert page.status_code == 200 and "Send test event" in page.text
        csrf = _csrf(page.text)

        forged = browser.post(f"/ui/webhooks/{hook['id']}/test", data={"csrf": "wrong"})
        assert forged.status_code == 403 and receiver.wait(path, 1, timeout=1.0) == []

        sent = browser.post(f"/ui/webhooks/{hook['id']}/test", data={"csrf": csrf})
        assert sent.status_code == 200 and "queued" in sent.text, sent.text
        [got] = receiver.wait(path, 1)
        event_id = got.headers["webhook-id"]
        assert event_id in sent.text
        wait_deliveries(hooked, hook["name"], 1)

        shown = browser.get(f"/ui/webhooks/{hook['id']}").text
        assert f"/events/{event_id}/redeliver" in shown
        again = browser.post(f"/ui/webhooks/{hook['id']}/events/{event_id}/redeliver", data={"csrf": csrf})
        assert again.status_code == 200 and "queued again" in again.text
        assert [r.headers["webhook-id"] for r in receiver.wait(path, 2)] == [event_id, event_id]
