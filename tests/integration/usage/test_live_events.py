"""End to end: live requests through a real ``relay serve`` and the real fake upstream leave usage
events (and, when switched on, payloads) that the usage API returns (SPEC §8, §9); batch items are never
payload-logged (§10.8)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select

from relay.fake_upstream.token_counts import complete
from relay.store import tables as t
from tests.fixtures.live import (
    CHAT_MODEL,
    CHAT_UPSTREAM,
    HOST_OPENAI,
    MESSAGES_MODEL,
    RESPONSES_MODEL,
    Gateway,
)
from tests.integration.batch_api.helpers import chat_item, item_events, submit, wait_finished

# The recording path does not depend on the backend (the store tests cover both): one gateway is enough.
pytestmark = pytest.mark.parametrize("gateway", ["sqlite"], indirect=True)


def wait_event(gateway: Gateway, request_id: str) -> dict[str, Any]:
    """The event of one request, once the background writer (flushing every 0.2 s) has stored it."""
    deadline = time.monotonic() + 5
    while True:
        response = gateway.relay.control.get("/api/usage/events", params={"limit": 1000})
        assert response.status_code == 200, response.text
        found = [e for e in response.json()["events"] if e["request_id"] == request_id]
        if found:
            assert len(found) == 1
            return found[0]
        assert time.monotonic() < deadline, f"no usage event for {request_id}"
        time.sleep(0.05)


def test_a_live_request_leaves_one_priced_attributed_event(gateway: Gateway) -> None:
    response = gateway.chat()
    assert response.status_code == 200, response.text
    event = wait_event(gateway, response.headers["x-relay-request-id"])
    usage = response.json()["usage"]
    assert event["source"] == "live" and event["status"] == 200 and event["error_kind"] is None
    assert (event["model"], event["upstream_model"], event["host"]) == (
        CHAT_MODEL,
        CHAT_UPSTREAM,
        HOST_OPENAI,
    )
    assert (event["input_tokens"], event["output_tokens"]) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    # PRICING of the live catalog: input 1.0 $/M, output 2.0 $/M → 1000 and 2000 n$ per token
    assert event["cost_nanos"] == 1000 * event["input_tokens"] + 2000 * event["output_tokens"]
    assert event["principal_kind"] == "serviceaccount" and event["credential_kind"] == "key"
    assert event["project_id"].startswith("prj_") and event["team_id"].startswith("tm_")
    summary = gateway.relay.control.get(
        "/api/usage/summary", params={"group_by": "model", "model": CHAT_MODEL}
    )
    assert summary.json()["rows"][0]["requests"] >= 1


def test_payloads_are_captured_only_when_switched_on_and_opted_in(gateway: Gateway) -> None:
    relay = gateway.relay
    key_id, opted_in = gateway.mint_key()
    assert relay.api("PATCH", f"/api/keys/{key_id}", {"payload_logging": True}).status_code == 200
    switch = "/api/settings/payload_logging"
    try:
        # Opted in, switch off: nothing is captured.
        off = gateway.chat(key=opted_in)
        wait_event(gateway, off.headers["x-relay-request-id"])
        assert relay.control.get(f"/api/payloads/{off.headers['x-relay-request-id']}").status_code == 404

        assert relay.api("PUT", switch, {"enabled": True, "max_bytes": 4096}).status_code == 200
        on = gateway.chat(key=opted_in)
        not_opted_in = gateway.chat()  # the module's key and policy do not opt in
        request_id = on.headers["x-relay-request-id"]
        wait_event(gateway, request_id)
        wait_event(gateway, not_opted_in.headers["x-relay-request-id"])
        payload = relay.control.get(f"/api/payloads/{request_id}")
        assert payload.status_code == 200, payload.text
        body = payload.json()
        assert body["request"]["model"] == CHAT_MODEL and body["response"] == on.json()
        assert not body["request_truncated"] and not body["response_truncated"]
        assert (
            relay.control.get(f"/api/payloads/{not_opted_in.headers['x-relay-request-id']}").status_code
            == 404
        )
    finally:
        relay.api("PUT", switch, {"enabled": False})


def test_a_passed_through_upstream_error_is_not_priced(gateway: Gateway) -> None:
    """SPEC §8: ``cost_nanos`` is null when no upstream answer was priced — the same rule as a batch
    item's (an upstream 400 is returned as it is, and recorded with its status but no cost)."""
    response = gateway.chat(fake={"status": 400})
    assert response.status_code == 400, response.text
    event = wait_event(gateway, response.headers["x-relay-request-id"])
    assert event["status"] == 400 and event["error_kind"] is not None
    assert event["cost_nanos"] is None, event


THINK = "think it over fake:reasoning=7"
REASONING_CASES = [
    (
        "/openai/v1/chat/completions",
        "chat",
        {"model": CHAT_MODEL, "messages": [{"role": "user", "content": THINK}]},
    ),
    ("/openai/v1/responses", "responses", {"model": RESPONSES_MODEL, "input": THINK, "store": False}),
    (
        "/anthropic/v1/messages",
        "messages",
        {"model": MESSAGES_MODEL, "max_tokens": 40, "messages": [{"role": "user", "content": THINK}]},
    ),
]


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize(("path", "api", "body"), REASONING_CASES, ids=[c[1] for c in REASONING_CASES])
def test_the_event_records_the_reasoning_tokens_the_upstream_reports(
    gateway: Gateway, path: str, api: Any, body: dict[str, Any], stream: bool
) -> None:
    """OpenAI chat and Responses report reasoning tokens (here 7, the fake's ``fake:reasoning=7``),
    bodies and streams alike (a chat stream's usage chunk is the one Relay asked for); Anthropic
    reports none: null, not 0. They are among the output tokens either way."""
    expected = complete(api, body)
    if stream:
        result = gateway.stream(path, {**body, "stream": True})
        status, request_id = result.status, result.headers["x-relay-request-id"]
    else:
        response = gateway.post(path, body)
        status, request_id = response.status_code, response.headers["x-relay-request-id"]
    assert status == 200
    event = wait_event(gateway, request_id)
    assert event["streamed"] is stream
    assert event["output_tokens"] == expected.output_tokens
    assert event["reasoning_tokens"] == (None if api == "messages" else 7)


def test_batch_items_are_never_payload_logged(gateway: Gateway) -> None:
    """SPEC §10.8: payload logging never captures batch items. With the switch on and the key opted in,
    a live request with that key is captured, and a batch submitted with it leaves no payload row."""
    relay = gateway.relay
    key_id, key = gateway.mint_key()
    assert relay.api("PATCH", f"/api/keys/{key_id}", {"payload_logging": True}).status_code == 200
    switch = "/api/settings/payload_logging"
    payload_rows = select(func.count()).select_from(t.payloads)
    assert relay.api("PUT", switch, {"enabled": True, "max_bytes": 4096}).status_code == 200
    try:
        before = gateway.sql(payload_rows)
        live = gateway.chat(key=key)
        live_id = live.headers["x-relay-request-id"]
        wait_event(gateway, live_id)
        assert relay.control.get(f"/api/payloads/{live_id}").status_code == 200  # this key IS captured

        batch_id = submit(gateway, "openai", [chat_item(n) for n in range(3)], key=key)
        wait_finished(gateway, batch_id, key=key)
        events = item_events(gateway, batch_id, 3)
        assert {e["status"] for e in events.values()} == {200}
        for event in events.values():
            assert event["request_id"], event  # the id a capture would be stored under
            assert relay.control.get(f"/api/payloads/{event['request_id']}").status_code == 404, event
        assert gateway.sql(payload_rows) == before + 1  # the live request's, no item's
    finally:
        relay.api("PUT", switch, {"enabled": False})
