"""The official ``anthropic`` SDK against ``relay serve`` (SQLite and Postgres), SPEC §15: create,
retrieve, list with pagination, cancel, delete, ``results()`` (which fetches ``results_url`` itself) and
an older client's direct ``/results``; every result type; one usage event per request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anthropic
import pytest
from sqlalchemy import select, update

from relay.store import tables as t
from tests.fixtures.live import Gateway, uniq
from tests.integration.batch_api.helpers import mint_token
from tests.integration.message_batches.helpers import (
    NOT_FOUND,
    PATH,
    counted,
    jsonl,
    params,
    raw,
    request,
    sdk,
    slow,
    usage_events,
    wait_ended,
)


def test_create_retrieve_and_results_with_every_outcome(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    client = sdk(gw)
    requests = [
        request("ok-0", 0),
        request("bad-request", 1, fake={"status": 400}),
        request("no-model", 2, model="no-such-model"),
        request("ok-3", 3),
    ]
    created = client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    assert created.id.startswith("msgbatch_") and created.type == "message_batch"
    assert created.processing_status == "in_progress" and created.results_url is None
    assert created.request_counts.processing == 4 and counted(created) == 4
    assert created.expires_at - created.created_at == timedelta(hours=24)
    assert created.ended_at is None and created.cancel_initiated_at is None and created.archived_at is None
    stored = gw.sql(select(t.batches.c.expires_at).where(t.batches.c.id == created.id))
    stored = stored if stored.tzinfo is not None else stored.replace(tzinfo=UTC)
    assert abs(stored - created.expires_at) < timedelta(seconds=5)  # what the engine's sweep acts on

    ended = wait_ended(client, created.id, 4)
    counts = ended.request_counts
    assert (counts.processing, counts.succeeded, counts.errored, counts.canceled, counts.expired) == (
        0,
        2,
        2,
        0,
        0,
    )
    assert ended.ended_at is not None and ended.ended_at >= ended.created_at
    # Without RELAY_PUBLIC_URL: the request's scheme and Host, on the /anthropic path.
    assert ended.results_url == f"{gw.url}/anthropic/v1/messages/batches/{created.id}/results"

    results = list(client.messages.batches.results(created.id))  # fetches results_url itself
    assert [r.custom_id for r in results] == ["ok-0", "bad-request", "no-model", "ok-3"]  # submit order
    assert results[0].result.type == "succeeded" and results[3].result.type == "succeeded"
    assert results[0].result.message.type == "message"  # the upstream's Message, as it answered
    bad, routing = results[1].result, results[2].result
    assert bad.type == "errored" and bad.error.error.type == "invalid_request_error"  # upstream 4xx
    assert bad.error.error.message == "upstream returned 400: Invalid request."
    assert routing.type == "errored" and routing.error.error.type == "api_error"  # every other cause
    assert routing.error.error.message == 'routing: model "no-such-model" not found'

    # An older SDK calls /results directly; the alias path answers the same lines.
    lines = jsonl(raw(gw, "GET", f"{PATH}/{created.id}/results"))
    assert lines == jsonl(raw(gw, "GET", f"/v1/messages/batches/{created.id}/results"))
    assert lines[1] == {
        "custom_id": "bad-request",
        "result": {
            "type": "errored",
            "error": {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "upstream returned 400: Invalid request.",
                },
            },
        },
    }
    assert lines[0]["result"]["message"]["type"] == "message"

    events = usage_events(gw, created.id, 4)
    assert len(events) == 4 and sorted(e["batch_idx"] for e in events) == [0, 1, 2, 3]
    assert {e["batch_id"] for e in events} == {created.id} and {e["source"] for e in events} == {"batch"}


def test_cancel_answers_canceling_then_ends_with_canceled_results(mb_gateway: Gateway) -> None:
    client = sdk(mb_gateway)
    created = client.messages.batches.create(requests=[slow(f"slow-{i}") for i in range(20)])  # type: ignore[misc]
    answer = client.messages.batches.cancel(created.id)
    assert answer.processing_status == "canceling" and answer.cancel_initiated_at is not None
    assert answer.results_url is None and counted(answer) == 20
    again = client.messages.batches.cancel(created.id)  # idempotent, and still reads canceling
    assert again.processing_status == "canceling" and again.cancel_initiated_at == answer.cancel_initiated_at
    ended = wait_ended(client, created.id, 20)
    assert ended.request_counts.canceled == 20 and ended.cancel_initiated_at == answer.cancel_initiated_at
    results = list(client.messages.batches.results(created.id))
    assert [r.custom_id for r in results] == [f"slow-{i}" for i in range(20)]
    assert {r.result.type for r in results} == {"canceled"}
    assert len(usage_events(mb_gateway, created.id, 20)) == 20


def test_expiry_ends_the_batch_with_expired_results(mb_gateway: Gateway) -> None:
    client = sdk(mb_gateway)
    created = client.messages.batches.create(requests=[slow(f"late-{i}") for i in range(20)])  # type: ignore[misc]
    past = datetime.now(UTC) - timedelta(seconds=1)
    mb_gateway.sql(update(t.batches).where(t.batches.c.id == created.id).values(expires_at=past))
    ended = wait_ended(client, created.id, 20)
    assert ended.request_counts.expired == 20 and ended.cancel_initiated_at is None
    assert {r.result.type for r in client.messages.batches.results(created.id)} == {"expired"}


def test_results_and_delete_before_the_end_are_400_then_delete_removes_it(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    client = sdk(gw)
    created = client.messages.batches.create(requests=[slow("wait")])  # type: ignore[list-item]
    early = raw(gw, "GET", f"{PATH}/{created.id}/results")
    assert early.status_code == 400 and early.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(created.id)
    assert client.messages.batches.retrieve(created.id).processing_status == "in_progress"  # still there
    client.messages.batches.cancel(created.id)
    wait_ended(client, created.id, 1)
    deleted = client.messages.batches.delete(created.id)
    assert (deleted.id, deleted.type) == (created.id, "message_batch_deleted")
    for method, path in (("GET", ""), ("GET", "/results"), ("DELETE", ""), ("POST", "/cancel")):
        gone = raw(gw, method, f"{PATH}/{created.id}{path}")
        assert gone.status_code == 404 and gone.json() == NOT_FOUND
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(created.id)


def test_list_pages_newest_first_only_message_batches_of_the_owner(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    _, key = gw.mint_key()
    client = sdk(gw, key)
    ids = [client.messages.batches.create(requests=[request(f"r{i}", i)]).id for i in range(5)]  # type: ignore[list-item]
    relay_batch = gw.post("/v1/batches", {"shape": "anthropic", "requests": [{"model": "x"}]}, key=key)
    assert relay_batch.status_code == 202  # a §10 batch of the same owner: not a Message Batch
    newest_first = list(reversed(ids))
    assert [b.id for b in client.messages.batches.list(limit=2)] == newest_first  # auto-pagination
    first = client.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == newest_first[:2] and first.has_more is True
    assert (first.first_id, first.last_id) == (newest_first[0], newest_first[1])
    last = client.messages.batches.list(limit=2, after_id=newest_first[3])
    assert [b.id for b in last.data] == newest_first[4:] and last.has_more is False
    newer = client.messages.batches.list(limit=2, before_id=newest_first[3])
    assert [b.id for b in newer.data] == newest_first[1:3] and newer.has_more is True
    assert [b.id for b in client.messages.batches.list(limit=1000)] == newest_first
    # Another key of the same account owns none of them and cannot page from them.
    _, other = gw.mint_key()
    assert list(sdk(gw, other).messages.batches.list()) == []
    foreign = raw(gw, "GET", PATH, other, params={"after_id": ids[0]})
    assert foreign.status_code == 400 and "after_id" in foreign.json()["error"]["message"]


@pytest.mark.parametrize("limit", ["", "0", "1001", "x", "-1"])
def test_list_limit_outside_1_to_1000_is_400_naming_limit(mb_gateway: Gateway, limit: str) -> None:
    response = raw(mb_gateway, "GET", PATH, params={"limit": limit})
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("limit: ")


def test_the_owner_rule_with_keys_and_tokens_bearer_and_x_api_key(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    user = uniq("mb-user")
    spec = {"email": f"{user}@example.com", "memberships": [{"project": gw.project}]}
    gw.control_write("POST", "/api/apply", {"documents": [{"kind": "User", "name": user, "spec": spec}]}, 200)
    token, same_user = (mint_token(gw, user, gw.project)["token"] for _ in range(2))
    by_token = raw(
        gw, "POST", PATH, headers={"authorization": f"Bearer {token}"}, json={"requests": [request("t")]}
    )
    assert by_token.status_code == 200, by_token.text
    batch_id = by_token.json()["id"]
    # Any token of the same user reads it, by either header; the module key and another user do not.
    for headers in ({"authorization": f"Bearer {same_user}"}, {"x-api-key": same_user}):
        assert raw(gw, "GET", f"{PATH}/{batch_id}", headers=headers).status_code == 200
    for headers in ({"x-api-key": gw.key}, {"authorization": f"Bearer {gw.key}"}):
        for method, path in (("GET", ""), ("GET", "/results"), ("POST", "/cancel"), ("DELETE", "")):
            foreign = raw(gw, method, f"{PATH}/{batch_id}{path}", headers=headers)
            assert foreign.status_code == 404 and foreign.json() == NOT_FOUND
    unknown = raw(gw, "GET", f"{PATH}/msgbatch_00000000000000000000000000")
    assert unknown.status_code == 404 and unknown.json() == NOT_FOUND
    # A §10 batch of the same owner is not a Message Batch: the same 404.
    relay_id = gw.post("/v1/batches", {"shape": "anthropic", "requests": [{"model": "x"}]}).json()["id"]
    assert raw(gw, "GET", f"{PATH}/{relay_id}").json() == NOT_FOUND
    missing = raw(gw, "GET", PATH, headers={})
    assert missing.status_code == 401 and missing.json()["error"]["type"] == "authentication_error"


def test_an_upstream_5xx_is_an_api_error(mb_gateway: Gateway) -> None:
    gw = mb_gateway
    own = gw.scenario(["fail-500"], adapter="anthropic")  # its own host and key: no shared breaker trips
    client = sdk(gw, own.key)
    created = client.messages.batches.create(
        requests=[{"custom_id": "down", "params": params(0, model=own.model)}]  # type: ignore[typeddict-item]
    )
    assert wait_ended(client, created.id, 1).request_counts.errored == 1
    (line,) = jsonl(raw(gw, "GET", f"{PATH}/{created.id}/results", own.key))
    error = line["result"]["error"]["error"]
    assert error["type"] == "api_error", line
    assert error["message"].startswith(("upstream returned 500", f'all keys of host "{own.host}" failed'))
