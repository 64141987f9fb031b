"""Creating Message Batches (SPEC §15, §10.10): every refusal is a 400/413 in Anthropic's error shape
naming the request, and writes nothing; ``Idempotency-Key`` answers the first answer again; the alias
path creates the same kind of batch."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from relay.store import tables as t
from tests.fixtures.live import Gateway
from tests.integration.message_batches.conftest import MAX_BYTES, MAX_ITEMS
from tests.integration.message_batches.helpers import PATH, params, raw, request, sdk, wait_ended


def batch_count(gw: Gateway) -> int:
    return int(gw.sql(select(func.count()).select_from(t.batches)))


def item_count(gw: Gateway) -> int:
    return int(gw.sql(select(func.count()).select_from(t.batch_items)))


REFUSALS: list[tuple[Any, str]] = [
    ([], "the body must be a JSON object with requests"),
    ({"requests": []}, "requests: must not be empty"),
    ({}, "requests: field required"),
    ({"requests": {"custom_id": "a"}}, "requests: must be a list"),
    ({"requests": [request("a"), "nope"]}, "requests[1]: must be an object"),
    ({"requests": [{"params": params()}]}, "requests[0].custom_id: field required"),
    ({"requests": [request("a"), request("")]}, "requests[1].custom_id: must be 1 to 64 characters"),
    ({"requests": [request("x" * 65)]}, "requests[0].custom_id: must be 1 to 64 characters"),
    ({"requests": [request("has space")]}, "requests[0].custom_id: must be 1 to 64 characters"),
    ({"requests": [request("a.b")]}, "requests[0].custom_id: must be 1 to 64 characters"),
    ({"requests": [request("a\n")]}, "requests[0].custom_id: must be 1 to 64 characters"),
    ({"requests": [{"custom_id": 7, "params": params()}]}, "requests[0].custom_id: field required"),
    (
        {"requests": [request("a"), request("b"), request("a")]},
        "requests[2].custom_id: 'a' is already the custom_id of requests[0]",
    ),
    ({"requests": [{"custom_id": "a"}]}, "requests[0].params: field required"),
    ({"requests": [{"custom_id": "a", "params": [1]}]}, "requests[0].params: field required"),
    ({"requests": [request("a"), request("b", stream=True)]}, "requests[1].params.stream: "),
    ({"requests": [{**request("a"), "extra": 1}]}, "requests[0].extra: unknown field"),
    (
        {"requests": [request(f"r{i}") for i in range(MAX_ITEMS + 1)]},
        f"more than the limit of {MAX_ITEMS} (RELAY_BATCH_MAX_ITEMS)",
    ),
]


@pytest.mark.parametrize(("body", "message"), REFUSALS)
def test_refusals_name_the_request_and_write_nothing(mb_gateway: Gateway, body: Any, message: str) -> None:
    batches, items = batch_count(mb_gateway), item_count(mb_gateway)
    response = raw(mb_gateway, "POST", PATH, json=body)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert message in error["error"]["message"], error
    assert (batch_count(mb_gateway), item_count(mb_gateway)) == (batches, items)


def test_a_body_that_is_not_json_is_400(mb_gateway: Gateway) -> None:
    response = raw(mb_gateway, "POST", PATH, content=b"{nope", headers={"x-api-key": mb_gateway.key})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


def test_a_body_over_relay_batch_max_bytes_is_413_and_writes_nothing(mb_gateway: Gateway) -> None:
    batches = batch_count(mb_gateway)
    big = {"requests": [request("big", 0, system="x" * MAX_BYTES)]}
    response = raw(mb_gateway, "POST", PATH, json=big)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["type"] == "request_too_large"
    assert "RELAY_BATCH_MAX_BYTES" in response.json()["error"]["message"]
    assert batch_count(mb_gateway) == batches


def test_params_are_not_checked_at_create_a_bad_one_ends_errored(mb_gateway: Gateway) -> None:
    client = sdk(mb_gateway)
    created = client.messages.batches.create(
        requests=[{"custom_id": "no-model", "params": {"messages": []}}]  # type: ignore[typeddict-item]
    )
    assert wait_ended(client, created.id, 1).request_counts.errored == 1
    (result,) = list(client.messages.batches.results(created.id))
    assert result.result.type == "errored" and result.result.error.error.message.startswith("routing: ")


def test_idempotency_key_answers_the_first_answer_and_creates_nothing(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    body = {"requests": [request("once")]}
    headers = {"x-api-key": gw.key, "idempotency-key": "mb-create-1"}
    first = raw(gw, "POST", PATH, json=body, headers=headers)
    assert first.status_code == 200, first.text
    batches = batch_count(gw)
    again = raw(gw, "POST", "/v1/messages/batches", json=body, headers=headers)  # the alias too
    assert (again.status_code, again.content) == (200, first.content)
    assert batch_count(gw) == batches
    reused = raw(gw, "POST", PATH, json={"requests": [request("other")]}, headers=headers)
    assert reused.status_code == 409 and reused.json()["type"] == "error"
    assert reused.json()["error"]["type"] == "invalid_request_error"
    assert reused.json()["error"]["message"].startswith("idempotency_key_reused: ")
    assert batch_count(gw) == batches
    bad = raw(gw, "POST", PATH, json=body, headers={"x-api-key": gw.key, "idempotency-key": ""})
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]


def test_the_alias_path_serves_the_same_api(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    created = raw(gw, "POST", "/v1/messages/batches", json={"requests": [request("alias")]})
    assert created.status_code == 200 and created.json()["id"].startswith("msgbatch_")
    batch_id = created.json()["id"]
    wait_ended(sdk(gw), batch_id, 1)
    got = raw(gw, "GET", f"/v1/messages/batches/{batch_id}").json()
    assert got["results_url"] == f"{gw.url}/anthropic/v1/messages/batches/{batch_id}/results"
    assert raw(gw, "GET", f"{PATH}/{batch_id}").json() == got
    wrong = raw(gw, "PUT", PATH)
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET, POST"
    assert wrong.json()["type"] == "error"
