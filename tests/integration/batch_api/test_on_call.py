"""What on-call reads from a real ``relay serve`` (SPEC §12, §18 log format, issue #28): JSON log lines
without uvicorn's ``color_message`` or duplicated lines, one INFO line per batch submitted, cancelled
and finished (never one per item), one line per breaker opening and closing of a tuned host, and the
metrics a batch and a live request leave on ``/metrics``
(item durations, upstream latency by source, upstream errors by key name, requests by model, tokens
and cost, no ``_created`` series), on SQLite and Postgres."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fixtures.live import Gateway, metric_value
from tests.integration.batch_api.helpers import batch_events, chat_item, submit, wait_finished


def events(gateway: Gateway, event: str, batch_id: str) -> list[dict[str, Any]]:
    return [r for r in gateway.log_records() if r.get("event") == event and r.get("batch_id") == batch_id]


def wait_event(gateway: Gateway, event: str, batch_id: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not (found := events(gateway, event, batch_id)):
        assert time.monotonic() < deadline, f"no {event} line for {batch_id}"
        time.sleep(0.05)
    return found[0]


def test_json_lines_carry_no_color_message_and_no_duplicates(gateway: Gateway) -> None:
    text = gateway.relay.logs()
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines, "the relay wrote nothing"
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for record in records:
        assert {"ts", "level", "logger", "message"} <= set(record), record
        assert "color_message" not in record
    assert "\x1b" not in text and "\\u001b" not in text  # no ANSI escapes anywhere
    started = [
        r for r in records if r["logger"].startswith("uvicorn") and r["message"].startswith("Started server")
    ]
    assert len(started) == 1, started  # two servers (inference, control), one line


def test_a_batch_logs_one_line_when_submitted_and_one_when_finished(gateway: Gateway) -> None:
    batch_id = submit(
        gateway, "openai", [chat_item(i) for i in range(3)] + [chat_item(9, fake={"status": 400})]
    )
    wait_finished(gateway, batch_id)
    submitted = wait_event(gateway, "batch_submitted", batch_id)
    assert (submitted["level"], submitted["items"], submitted["api"]) == ("info", 4, "relay")
    assert submitted["message"] == f"batch {batch_id} submitted: 4 items (relay API)"
    assert submitted["project_id"] and submitted["policy_id"]
    finished = wait_event(gateway, "batch_finished", batch_id)
    assert (finished["level"], finished["ended"]) == ("info", "completed")
    assert (finished["items_completed"], finished["items_discarded"]) == (3, 1)
    assert finished["message"] == f"batch {batch_id} finished (completed): completed 3, discarded 1"
    assert len(events(gateway, "batch_submitted", batch_id)) == 1
    assert len(events(gateway, "batch_finished", batch_id)) == 1


def test_metrics_after_a_batch_and_a_live_request(gateway: Gateway) -> None:
    sc = gateway.scenario(["ok"])  # a host, key and model of this test's own: exact counts
    key_name = sc.host_keys[0]["name"]
    before = gateway.metrics()
    items = [chat_item(i, model=sc.model) for i in range(3)] + [
        chat_item(9, model=sc.model, fake={"status": 400})
    ]
    batch_id = submit(gateway, "openai", items, key=sc.key)
    wait_finished(gateway, batch_id, sc.key)
    live = gateway.chat(sc.model, key=sc.key)
    assert live.status_code == 200, live.text
    gateway.wait_log_line(live.headers["x-relay-request-id"])  # recorded (after the last byte)
    after = gateway.metrics()

    def grew(name: str, **labels: str) -> float:
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    assert "_created" not in after  # no counter exports its creation time
    assert grew("relay_batch_item_duration_seconds_count", state="completed") == 3
    assert grew("relay_batch_item_duration_seconds_count", state="discarded") == 1
    assert grew("relay_batch_item_duration_seconds_bucket", state="completed", le="+Inf") == 3
    latency = "relay_upstream_latency_seconds_count"
    assert metric_value(after, latency, host=sc.host, source="batch") == 4  # the 400 was answered too
    assert metric_value(after, latency, host=sc.host, source="live") == 1
    errors = {"host": sc.host, "host_key_name": key_name}
    assert metric_value(after, "relay_upstream_errors_total", **errors, status="400") == 1
    assert metric_value(after, "relay_upstream_errors_total", **errors) == 1  # nothing else failed
    assert metric_value(after, "relay_requests_total", model=sc.model, status="200") == 1
    assert metric_value(after, "relay_requests_total", model=sc.model) == 1  # batch items are not requests

    usage = live.json()["usage"]
    events = [e for e in batch_events(gateway, batch_id) if e["status"] == 200]
    assert len(events) == 3
    for kind, field, live_tokens in (
        ("input", "input_tokens", usage["prompt_tokens"]),
        ("output", "output_tokens", usage["completion_tokens"]),
    ):
        expected = sum(e[field] for e in events) + live_tokens
        assert expected > 0
        assert metric_value(after, "relay_tokens_total", model=sc.model, kind=kind) == expected
    cost = metric_value(after, "relay_cost_usd_total", model=sc.model)
    assert cost > 0
    batch_cost = sum(e["cost_nanos"] for e in events) / 1e9  # the batch's share, as its events say
    assert batch_cost > 0 and cost > batch_cost * 0.999  # plus the live request's


def test_a_cancel_logs_one_line_not_one_per_item(gateway: Gateway) -> None:
    n = 200
    batch_id = submit(gateway, "openai", [chat_item(i, fake={"latency_ms": 3000}) for i in range(n)])
    wait_event(gateway, "batch_submitted", batch_id)
    deadline = time.monotonic() + 10  # wait until some items run, so the cancel stops running ones too
    while (
        not gateway.client.get(f"/v1/batches/{batch_id}", headers=gateway.auth(None))
        .json()["counts"]
        .get("running")
    ):
        assert time.monotonic() < deadline, "no item of the batch started"
        time.sleep(0.05)
    cancelled = gateway.post(f"/v1/batches/{batch_id}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    wait_finished(gateway, batch_id)
    line = wait_event(gateway, "batch_cancelled", batch_id)
    assert line["level"] == "info" and 0 < line["items"] < n  # the waiting ones; the running ones stop
    finished = wait_event(gateway, "batch_finished", batch_id)
    assert finished["ended"] == "cancelled" and finished["items_cancelled"] >= line["items"]
    mentioning = [r for r in gateway.log_records() if batch_id in str(r.get("message", ""))]
    assert len(mentioning) <= 3, [r["message"] for r in mentioning]  # submitted, cancelled, finished
    assert not [r for r in gateway.log_records() if "no longer ours" in str(r.get("message", ""))]


def test_a_tuned_host_logs_one_line_per_opening_and_closing(gateway: Gateway) -> None:
    """SPEC §6 tuning through the control plane and the log of a real relay (with Redis on Postgres):
    the flaky key opens on its second failure, for at most ``max_open_s``, and closes when it answers."""
    sc = gateway.scenario(["flaky", "ok"])
    flaky, flaky_name = sc.value(0), sc.host_keys[0]["name"]
    gateway.patch("hosts", sc.host, {"breaker": {"threshold": 2, "window_s": 60, "max_open_s": 1}})

    def lines(event: str) -> list[dict[str, Any]]:
        return [r for r in gateway.log_records() if r.get("event") == event and r.get("host") == sc.host]

    gateway.fake.configure(key_rules=[{"pattern": flaky, "status": 503}])
    try:
        assert gateway.chat(sc.model, key=sc.key).status_code == 200  # failed over; below the threshold
        assert gateway.chat(sc.model, key=sc.key).status_code == 200  # the second failure opens it
        deadline = time.monotonic() + 10
        while not lines("breaker_opened"):
            assert time.monotonic() < deadline, "no breaker_opened line"
            time.sleep(0.05)
        assert gateway.fake.stats()["by_key"].get(flaky) == 2  # the first failure left it in the pool
        gateway.fake.configure(key_rules=[])
        deadline = time.monotonic() + 15
        while not lines("breaker_closed"):  # half-open after 1 s: a request probes it and closes it
            assert time.monotonic() < deadline, "no breaker_closed line"
            assert gateway.chat(sc.model, key=sc.key).status_code == 200
            time.sleep(0.1)
    finally:
        gateway.fake.configure(key_rules=[])
    [opened], [closed] = lines("breaker_opened"), lines("breaker_closed")
    assert (opened["level"], opened["host_key_name"], opened["reason"]) == (
        "warning",
        flaky_name,
        "upstream_5xx",
    )
    assert 0 < opened["open_for_s"] <= 1  # max_open_s caps the opening
    expected = f'breaker opened: key "{flaky_name}" of host "{sc.host}" (upstream_5xx)'
    assert opened["message"] == f"{expected}, for {opened['open_for_s']:g} s"
    assert (closed["level"], closed["host_key_name"], closed["host_key_id"]) == (
        "info",
        flaky_name,
        opened["host_key_id"],
    )
    assert flaky not in gateway.relay.logs()  # never a key value
    metrics = gateway.metrics()
    labels = {"host_key": opened["host_key_id"], "host_key_name": flaky_name}
    assert metric_value(metrics, "relay_breaker_open", **labels) == 0
    assert metric_value(metrics, "relay_breaker_trips_total", **labels, kind="server") == 2
    errors = {"host": sc.host, "host_key_name": flaky_name, "status": "503"}
    assert metric_value(metrics, "relay_upstream_errors_total", **errors) == 2
