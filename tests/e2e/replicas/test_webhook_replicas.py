"""Webhook delivery across restarts, replica kills and racing replicas (SPEC §10.10, §13): every state is in
the database, so a pending event is delivered after a restart, an attempt cut short by a kill is made
again after its lease, two replicas on one Postgres record each attempt once and deliver nothing twice,
and an event that is never acknowledged is failed after the (scaled) 24 h window."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.fixtures.databases import create_postgres_database, drop_postgres_database
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway, metric_value
from tests.fixtures.polling import wait_for
from tests.integration.batch_api.helpers import chat_item, submit, wait_finished
from tests.integration.webhooks.conftest import WEBHOOK_ENV
from tests.integration.webhooks.helpers import deliveries, new_webhook, own_project, wait_deliveries
from tests.integration.webhooks.receiver import Receiver, verify

Factory = Callable[..., Any]


def start(
    relay_factory: Factory,
    fake: FakeUpstream,
    database_url: str,
    env: dict[str, str] | None = None,
    like: Gateway | None = None,
) -> Gateway:
    """A relay on ``database_url``; the first one applies the live catalog, later ones (``like``) share it."""
    # A 10 s attempt timeout (the default): on a loaded machine a 1 s one can expire before the receiver
    # reads the request, which adds a (correct, but unplanned) retry.
    process = relay_factory(database_url, {**WEBHOOK_ENV, "RELAY_WEBHOOK_TIMEOUT_S": "10", **(env or {})})
    if like is not None:
        return like.sharing(process)
    gw = Gateway(process, fake, "postgres" if database_url.startswith("postgresql") else "sqlite", None)
    gw.apply_catalog()
    return gw


def one_event(received: list[Any]) -> str:
    ids = {r.headers["webhook-id"] for r in received}
    assert len(ids) == 1, ids
    return ids.pop()


def test_a_pending_event_is_delivered_after_a_restart_by_a_replica_without_workers(
    database_url: str, relay_factory: Factory, fake_upstream: FakeUpstream, receiver: Receiver
) -> None:
    first = start(relay_factory, fake_upstream, database_url)
    project, key = own_project(first)
    path = receiver.path(statuses=[503])
    hook = new_webhook(first, receiver.url(path), project=project)
    batch_id = submit(first, "openai", [chat_item(0)], key=key)
    wait_finished(first, batch_id, key=key)
    assert len(receiver.wait(path, 2)) >= 2  # failing, so still pending
    first.relay.stop()
    receiver.answer(path, [200])
    before = len(receiver.received(path))

    # The replica that delivers runs no batch workers: every replica delivers (SPEC §10.10).
    second = start(relay_factory, fake_upstream, database_url, {"RELAY_BATCH_WORKERS": "0"}, like=first)
    got = receiver.wait(path, before + 1)
    assert len(got) == before + 1
    event_id = one_event(got)
    assert all(verify(hook["secret"], r.headers, r.body) for r in got)
    assert got[-1].json()["data"]["id"] == batch_id
    attempts = wait_deliveries(second, hook["name"], before + 1)
    assert attempts[0]["status_code"] == 200 and attempts[0]["next_attempt_at"] is None
    # Every attempt made is recorded once, numbered without gaps, under the one event id.
    assert sorted(a["attempt"] for a in attempts) == list(range(1, before + 2))
    assert {a["event_id"] for a in attempts} == {event_id}
    assert all(a["status_code"] == 503 for a in attempts[1:])


def test_an_attempt_cut_short_by_a_kill_is_made_again_after_its_lease(
    database_url: str, relay_factory: Factory, fake_upstream: FakeUpstream, receiver: Receiver
) -> None:
    env = {"RELAY_WEBHOOK_TIMEOUT_S": "5"}  # the lease: 5 s + 5 s
    first = start(relay_factory, fake_upstream, database_url, env)
    project, key = own_project(first)
    path = receiver.path(hang_s=60, hang_count=1)  # the first request never gets its answer in time
    hook = new_webhook(first, receiver.url(path), project=project)
    batch_id = submit(first, "openai", [chat_item(0)], key=key)
    wait_finished(first, batch_id, key=key)
    assert len(receiver.wait(path, 1)) == 1
    first.relay.stop(signal.SIGKILL)  # mid-attempt: nothing recorded, the claim still held

    second = start(relay_factory, fake_upstream, database_url, env, like=first)
    got = receiver.wait(path, 2, timeout=40)
    assert len(got) == 2
    one_event(got)
    [attempt] = wait_deliveries(second, hook["name"], 1)
    assert attempt["attempt"] == 1 and attempt["status_code"] == 200  # the killed one left no record
    time.sleep(1.5)
    assert len(receiver.received(path)) == 2


def test_an_event_never_acknowledged_is_failed_after_the_window(
    database_url: str, relay_factory: Factory, fake_upstream: FakeUpstream, receiver: Receiver
) -> None:
    gw = start(
        relay_factory, fake_upstream, database_url, {"RELAY_WEBHOOK_RETRY_SCALE": "0.00002"}
    )  # 24 h → 1.7 s
    project, key = own_project(gw)
    path = receiver.path(statuses=[500])
    hook = new_webhook(gw, receiver.url(path), project=project)
    batch_id = submit(gw, "openai", [chat_item(0)], key=key)
    wait_finished(gw, batch_id, key=key)
    deadline = time.monotonic() + 30
    while True:
        attempts = deliveries(gw, hook["name"], limit=1000)
        if attempts and attempts[0]["next_attempt_at"] is None:
            break
        assert time.monotonic() < deadline, attempts[:2]
        time.sleep(0.2)
    assert len(attempts) >= 3 and all(a["status_code"] == 500 for a in attempts)
    assert all(a["next_attempt_at"] for a in attempts[1:])
    time.sleep(1.0)
    assert len(receiver.received(path)) == len(attempts)  # failed: no attempt after the last one
    assert sorted(a["attempt"] for a in attempts) == list(range(1, len(attempts) + 1))
    assert metric_value(gw.metrics(), "relay_webhook_deliveries_total", outcome="failed") == 1


EXPIRED_LOG = "webhook events marked failed: still pending past the retry window"


def queue_gauges(gw: Gateway) -> tuple[float, float]:
    metrics = gw.metrics()
    return (
        metric_value(metrics, "relay_webhook_queue_depth"),
        metric_value(metrics, "relay_webhook_oldest_pending_seconds"),
    )


def test_a_disabled_webhooks_pending_event_is_failed_after_the_window(
    database_url: str, relay_factory: Factory, fake_upstream: FakeUpstream, receiver: Receiver
) -> None:
    """Disabled mid-retry, a webhook's event is never claimed again: it leaves the queue gauges at once
    and the deliverer's expiry pass fails it after the window (+ one claim lease), so enabling the
    webhook again brings no attempt."""
    env = {"RELAY_WEBHOOK_RETRY_SCALE": "0.0001", "RELAY_WEBHOOK_TIMEOUT_S": "2"}  # 24 h → 8.6 s; lease 7 s
    gw = start(relay_factory, fake_upstream, database_url, env)
    project, key = own_project(gw)
    path = receiver.path(statuses=[500])
    hook = new_webhook(gw, receiver.url(path), project=project)
    wait_finished(gw, submit(gw, "openai", [chat_item(0)], key=key), key=key)
    assert receiver.wait(path, 1)
    gw.control_write("PATCH", f"/api/webhooks/{hook['name']}", {"enabled": False}, 200)
    time.sleep(0.5)  # an attempt claimed just before is recorded
    attempts = deliveries(gw, hook["name"], limit=1000)
    assert attempts[0]["next_attempt_at"] is not None, attempts[:2]  # disabled while still pending
    tried = len(receiver.received(path))
    assert tried == len(attempts)
    # Once the gauges have been refreshed (every 5 s) they leave it out, before the pass fails it
    # (8.6 s + the 7 s lease after it was recorded): the pass's log line must not be there yet.
    wait_for(
        "the queue gauges to leave the disabled webhook's event out", lambda: queue_gauges(gw) == (0, 0), 30
    )
    assert EXPIRED_LOG not in gw.relay.logs(), "the pass failed the event before the gauges were checked"
    wait_for("the expiry pass to fail the event", lambda: EXPIRED_LOG in gw.relay.logs(), 60, gw.relay.logs)

    gw.control_write("PATCH", f"/api/webhooks/{hook['name']}", {"enabled": True}, 200)
    time.sleep(3.0)  # several claim polls: a still-pending event would be attempted now
    assert len(receiver.received(path)) == tried  # failed by the pass: nothing left to attempt
    assert deliveries(gw, hook["name"], limit=1000) == attempts  # and no attempt recorded for it
    assert metric_value(gw.metrics(), "relay_webhook_queue_depth") == 0


def test_two_replicas_record_each_attempt_once_and_deliver_nothing_twice(
    relay_factory: Factory, fake_upstream: FakeUpstream, receiver: Receiver
) -> None:
    database_url = create_postgres_database()
    started: list[Gateway] = []
    try:
        shared = {"RELAY_BATCH_PAYLOAD_STORE": "database"}  # replicas with no shared volume
        first = start(relay_factory, fake_upstream, database_url, shared)
        started.append(first)
        second = start(relay_factory, fake_upstream, database_url, shared, like=first)
        started.append(second)
        project, key = own_project(first)
        second.wait_until_known(key)
        paths = [receiver.path(statuses=[500, 200]) for _ in range(8)]  # each event: fail once, then ok
        hooks = [new_webhook(first, receiver.url(p), project=project) for p in paths]
        batches = [submit(gw, "openai", [chat_item(i)], key=key) for i, gw in enumerate((first, second))]
        for batch_id in batches:
            wait_finished(first, batch_id, key=key)

        for path, hook in zip(paths, hooks, strict=True):
            got = receiver.wait(path, 4)
            assert len(got) == 4, hook["name"]
            per_event = Counter(r.headers["webhook-id"] for r in got)
            assert sorted(per_event.values()) == [2, 2]  # two events, each failed once and delivered once
            assert {r.json()["data"]["id"] for r in got} == set(batches)
            attempts = wait_deliveries(first, hook["name"], 4)
            assert len(attempts) == 4
            assert Counter((a["event_id"], a["attempt"], a["status_code"]) for a in attempts) == Counter(
                {(event, n, status): 1 for event in per_event for n, status in ((1, 500), (2, 200))}
            )
        time.sleep(1.5)
        assert all(len(receiver.received(p)) == 4 for p in paths)  # nothing delivered twice
        total = sum(
            metric_value(gw.metrics(), "relay_webhook_deliveries_total", outcome=outcome)
            for gw in (first, second)
            for outcome in ("delivered", "retrying")
        )
        assert total == 32  # 16 events × 2 attempts, each made by exactly one replica
    finally:
        for gw in started:
            gw.relay.close()
        drop_postgres_database(database_url)
