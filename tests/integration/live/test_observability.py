"""SPEC §12 what a live request leaves behind, over HTTP: request, latency, rate-limit and breaker
metrics, and one log line per request (without secrets or bodies).

The fake upstream records the upstream key and body of every request, so where a request went and
which keys were tried in which order is visible. Key values follow the fake's naming convention
(``fail-500-…`` always answers 500, …; see docs/fake-upstream.md). Breakers, counters and limits are
per host key or policy, so each test builds its own host, keys, model and policy (random names) and
nothing leaks between the tests sharing the package's process (one ``relay serve`` per backend:
SQLite with hot state in process memory; Postgres with hot state in Redis).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    HOST_OPENAI,
    Gateway,
    metric_value,
)
from tests.integration.live.helpers import (
    chat,
    ok,
)

# --- §12 metrics -------------------------------------------------------------------------------------


def wait_metric(gateway: Gateway, name: str, at_least: float, **labels: str) -> float:
    """Metrics are recorded after the caller has its last byte: poll briefly."""
    deadline = time.monotonic() + 5
    while True:
        value = metric_value(gateway.metrics(), name, **labels)
        if value >= at_least or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def test_request_and_latency_metrics(gateway: Gateway, fake: FakeUpstream) -> None:
    before = gateway.metrics()
    ok_labels = {"route": "/openai/v1/chat/completions", "shape": "openai", "status": "200"}
    missing_labels = {"route": "/v1/chat/completions", "shape": "openai", "status": "404"}
    ok_before = metric_value(before, "relay_requests_total", **ok_labels)
    missing_before = metric_value(before, "relay_requests_total", **missing_labels)
    overhead_before = metric_value(before, "relay_gateway_overhead_seconds_count", shape="openai")
    upstream_before = metric_value(before, "relay_upstream_latency_seconds_count", host=HOST_OPENAI)

    assert gateway.chat().status_code == 200
    assert gateway.post("/v1/chat/completions", {"model": "no-such-model"}).status_code == 404

    assert wait_metric(gateway, "relay_requests_total", ok_before + 1, **ok_labels) == ok_before + 1
    assert (
        wait_metric(gateway, "relay_requests_total", missing_before + 1, **missing_labels)
        == missing_before + 1
    )
    after = gateway.metrics()
    assert metric_value(after, "relay_gateway_overhead_seconds_count", shape="openai") == overhead_before + 1
    assert (
        metric_value(after, "relay_upstream_latency_seconds_count", host=HOST_OPENAI) == upstream_before + 1
    )
    assert "relay_gateway_overhead_seconds_bucket{" in after
    assert "relay_upstream_latency_seconds_bucket{" in after


def test_rate_limit_rejection_metric(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(rules=[{"meter": "requests", "limit": 1, "window": "1d"}])
    ok(chat(gateway, s))
    assert chat(gateway, s).status_code == 429
    name = s.policy
    assert wait_metric(gateway, "relay_rate_limit_rejections_total", 1, policy=name) == 1
    assert wait_metric(gateway, "relay_requests_total", 1, route="/v1/chat/completions", status="429") >= 1


def test_budget_rejection_metric_is_its_own_series(gateway: Gateway, fake: FakeUpstream) -> None:
    # one call's cost spends the budget; the next is refused budget_exceeded, counted apart from rate limits
    s = gateway.scenario(rules=[{"meter": "cost_usd", "limit": "0.000001", "window": "30d"}])
    ok(chat(gateway, s))
    refused = chat(gateway, s)
    assert (refused.status_code, refused.json()["error"]["code"]) == (429, "budget_exceeded")
    assert wait_metric(gateway, "relay_budget_rejections_total", 1, policy=s.policy) == 1
    assert metric_value(gateway.metrics(), "relay_rate_limit_rejections_total", policy=s.policy) == 0


def test_breaker_metrics(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario(["fail-500", "ok"])
    ok(chat(gateway, s))
    bad, good = (gateway.object_id("host-keys", k["name"]) for k in s.host_keys)
    assert wait_metric(gateway, "relay_breaker_trips_total", 1, host_key=bad, kind="server") == 1
    text = gateway.metrics()
    assert metric_value(text, "relay_breaker_trips_total", host_key=good) == 0
    assert metric_value(text, "relay_breaker_open", host_key=bad) == 1
    assert metric_value(text, "relay_breaker_open", host_key=good) == 0


# --- §12 the request log -------------------------------------------------------------------------------


def lines_for(gateway: Gateway, request_id: str) -> list[dict[str, Any]]:
    gateway.wait_log_line(request_id)
    return [r for r in gateway.log_records() if r.get("request_id") == request_id]


def test_one_log_line_per_request_without_secrets_or_bodies(gateway: Gateway, fake: FakeUpstream) -> None:
    marker = "body-marker-7c1f0d2e"
    policy_id = gateway.relay.api("GET", "/api/policies/live-main").json()["id"]
    failing = gateway.scenario(["fail-500", "ok"])
    calls = {
        "ok": gateway.post(
            "/v1/chat/completions", {"model": CHAT_MODEL, "messages": [{"role": "user", "content": marker}]}
        ),
        "failover": chat(gateway, failing),
        "not_found": gateway.post("/v1/chat/completions", {"model": "no-such-model", "marker": marker}),
        "unauthenticated": gateway.post(
            "/v1/chat/completions", {"model": CHAT_MODEL, "marker": marker}, key="sk-relay-" + "x" * 43
        ),
        "bad_json": gateway.post("/v1/chat/completions", content=b'{"marker": "' + marker.encode()),
    }
    stream = gateway.stream(
        "/v1/chat/completions",
        {"model": CHAT_MODEL, "stream": True, "messages": [{"role": "user", "content": marker}]},
    )
    request_ids = {name: r.headers["x-relay-request-id"] for name, r in calls.items()}
    request_ids["stream"] = stream.headers["x-relay-request-id"]
    statuses = {name: r.status_code for name, r in calls.items()} | {"stream": stream.status}
    for name, request_id in request_ids.items():
        lines = lines_for(gateway, request_id)
        assert len(lines) == 1, (name, lines)
        line = lines[0]
        assert line["status"] == statuses[name], (name, line)
        assert isinstance(line["latency_ms"], int) and line["latency_ms"] >= 0, line
        assert line["level"] == "info" and line["message"] == "request"
    for name in ("ok", "stream", "not_found"):
        line = lines_for(gateway, request_ids[name])[0]
        assert line["policy_id"] == policy_id, line
        assert line["project_id"] and line["principal_id"] and line["credential_id"], line
    assert lines_for(gateway, request_ids["failover"])[0]["policy_id"] == gateway.object_id(
        "policies", failing.policy
    )
    assert "policy_id" not in lines_for(gateway, request_ids["unauthenticated"])[0]

    log = gateway.relay.logs()
    secrets = [
        gateway.key,
        failing.key,
        *gateway.host_key_values.values(),
        failing.value(0),
        failing.value(1),
    ]
    for secret in secrets:
        assert secret not in log
    assert marker not in log


def answered_by_the_app(gateway: Gateway) -> list[httpx.Response]:
    """Requests the inference app answers without the live pipeline: 405, unknown route, model list."""
    return [
        gateway.client.get("/v1/chat/completions"),
        gateway.client.post("/v1/no-such-route", json={}),
        gateway.client.get("/v1/models", headers=gateway.auth(None)),
    ]


def test_requests_answered_before_the_pipeline_are_logged_too(gateway: Gateway) -> None:
    """Regression: 405s, unknown routes and GET /v1/models handed out a request id that no log line
    carried (and were not counted in relay_requests_total)."""
    before = metric_value(gateway.metrics(), "relay_requests_total", status="405")
    for response in answered_by_the_app(gateway):
        line = gateway.wait_log_line(response.headers["x-relay-request-id"])
        assert line["status"] == response.status_code, line
    assert metric_value(gateway.metrics(), "relay_requests_total", status="405") == before + 1


def test_lines_of_requests_answered_by_the_app_are_complete(gateway: Gateway) -> None:
    responses = answered_by_the_app(gateway)
    lines = [gateway.wait_log_line(r.headers["x-relay-request-id"]) for r in responses]
    assert all(isinstance(line.get("latency_ms"), int) for line in lines), lines
    assert lines[-1].get("policy_id") == gateway.object_id("policies", gateway.policy), lines[-1]


def test_log_line_carries_every_attribution_id(gateway: Gateway, fake: FakeUpstream) -> None:
    """Regression: the line had policy, project, principal and credential ids but not team_id."""
    response = gateway.chat()
    line = lines_for(gateway, response.headers["x-relay-request-id"])[0]
    team_id = gateway.relay.api("GET", "/api/teams/live-team").json()["id"]
    assert {"policy_id", "project_id", "principal_id", "credential_id", "team_id"} <= set(line), json.dumps(
        line
    )
    assert line["team_id"] == team_id
