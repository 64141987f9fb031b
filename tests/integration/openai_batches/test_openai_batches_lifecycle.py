"""The OpenAI Batches façade's lifecycle beyond the happy path (SPEC §14, §10.8, §10.10): cancel
(``cancelling`` → ``cancelled`` with its files), expiry at ``expires_at`` (``expired``), the owner
rule with keys and tokens, ``Idempotency-Key``, and §10.4 causes as they appear in the error file.
One relay per backend for the module (SQLite, Postgres)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import openai
import pytest
from sqlalchemy import update

from relay.store import tables as t
from tests.fixtures.live import MESSAGES_MODEL, Gateway
from tests.integration.batch_api.helpers import item_events
from tests.integration.openai_batches.helpers import (
    NOT_FOUND,
    body_for,
    create,
    file_lines,
    jsonl,
    line,
    new_user,
    raw,
    sdk,
    token,
    upload,
    wait_ended,
)

CHAT = "/v1/chat/completions"


def _slow(n: int, latency_ms: int = 3000) -> list[dict[str, object]]:
    return [line(f"s{i}", CHAT, body_for(CHAT, i, fake={"latency_ms": latency_ms})) for i in range(n)]


def _wait_running(gw: Gateway, batch_id: str) -> None:
    deadline = time.monotonic() + 15
    while (
        gw.client.get(f"/v1/batches/{batch_id}", headers=gw.auth(gw.key)).json()["counts"].get("running", 0)
        == 0
    ):
        assert time.monotonic() < deadline, "no item started"
        time.sleep(0.05)


def test_cancel_reads_cancelling_then_cancelled_with_an_error_file(gateway: Gateway) -> None:
    gw = gateway
    client = sdk(gw)
    created = create(client, _slow(30), output_expires_after={"anchor": "created_at", "seconds": 3600})
    _wait_running(gw, created.id)
    answer = client.batches.cancel(created.id)
    assert answer.status == "cancelling" and answer.cancelling_at is not None and answer.cancelled_at is None
    done = wait_ended(client, created.id)
    assert done.status == "cancelled" and done.cancelled_at is not None and done.cancelling_at is not None
    assert done.completed_at is None and done.expired_at is None
    counts = done.request_counts
    assert counts is not None and counts.total == 30 and counts.completed + counts.failed == 30
    errors = file_lines(client, done.error_file_id)
    assert len(errors) == counts.failed > 0
    for item in errors:
        assert item["response"] is None
        assert item["error"] == {"code": "batch_cancelled", "message": "cancelled"}
    outputs = file_lines(client, done.output_file_id) if done.output_file_id else []
    assert sorted(i["custom_id"] for i in errors + outputs) == sorted(f"s{i}" for i in range(30))
    info = client.files.retrieve(done.error_file_id)  # type: ignore[arg-type]
    assert info.purpose == "batch_output" and info.expires_at == info.created_at + 3600
    events = item_events(gw, created.id, 30)  # exactly one usage event per line
    assert {events[i]["error_kind"] for i in range(30)} <= {None, "cancelled"}
    again = client.batches.cancel(created.id)  # an ended batch is answered as it is
    assert again.status == "cancelled"


def test_expiry_ends_the_batch_expired_with_batch_expired_lines(gateway: Gateway) -> None:
    gw = gateway
    client = sdk(gw)
    created = create(client, _slow(30, 4000))
    _wait_running(gw, created.id)
    past = datetime.now(UTC) - timedelta(seconds=1)
    gw.sql(update(t.batches).where(t.batches.c.id == created.id).values(expires_at=past))
    done = wait_ended(client, created.id)
    assert done.status == "expired" and done.expired_at is not None
    assert done.completed_at is None and done.cancelled_at is None and done.cancelling_at is None
    errors = file_lines(client, done.error_file_id)
    assert errors and all(item["error"]["code"] == "batch_expired" for item in errors)
    assert all(item["error"]["message"].startswith("expired: batch expired at ") for item in errors)


def test_the_owner_rule_with_keys_and_tokens(gateway: Gateway) -> None:
    gw = gateway
    user = new_user(gw)
    first, second = token(gw, user), token(gw, user)
    created = create(sdk(gw, first), [line("a", CHAT, body_for(CHAT, 0))])
    assert sdk(gw, second).batches.retrieve(created.id).id == created.id  # any token of the same user
    assert [b.id for b in sdk(gw, second).batches.list()] == [created.id]
    strangers = [gw.mint_key()[1], token(gw, new_user(gw)), gw.key]
    for stranger in strangers:
        for method, path in (("GET", f"/batches/{created.id}"), ("POST", f"/batches/{created.id}/cancel")):
            answer = raw(gw, method, path, stranger)
            assert answer.status_code == 404 and answer.json() == NOT_FOUND, answer.text
        assert created.id not in {b.id for b in sdk(gw, stranger).batches.list()}
    unknown = raw(gw, "GET", "/batches/batch_00000000000000000000000000", first)
    assert unknown.status_code == 404 and unknown.json() == NOT_FOUND
    native = raw(gw, "GET", "/batches/b_00000000000000000000000000", first)
    assert native.json() == NOT_FOUND
    with pytest.raises(openai.NotFoundError):
        sdk(gw, gw.mint_key()[1]).batches.retrieve(created.id)


def test_idempotent_create_answers_the_first_answer_again(gateway: Gateway) -> None:
    gw = gateway
    key = gw.mint_key()[1]
    file_id = upload(sdk(gw, key), jsonl([line("a", CHAT, body_for(CHAT, 0))]))
    body = {"input_file_id": file_id, "endpoint": CHAT, "completion_window": "24h"}
    headers = {**gw.auth(key), "Idempotency-Key": "nightly-7"}
    first = gw.client.post("/openai/v1/batches", json=body, headers=headers)
    again = gw.client.post("/openai/v1/batches", json=body, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    reused = gw.client.post("/openai/v1/batches", json={**body, "metadata": {"x": "y"}}, headers=headers)
    assert reused.status_code == 409 and reused.json()["error"]["code"] == "idempotency_key_reused"
    assert [b["id"] for b in raw(gw, "GET", "/batches", key).json()["data"]] == [first.json()["id"]]
    bad = gw.client.post("/openai/v1/batches", json=body, headers={**gw.auth(key), "Idempotency-Key": ""})
    assert bad.status_code == 400


def test_causes_in_the_error_file(gateway: Gateway) -> None:
    gw = gateway
    client = sdk(gw)
    lines = [
        line("ok", CHAT, body_for(CHAT, 0)),
        line("upstream", CHAT, body_for(CHAT, 1, fake={"status": 400})),
        line("routing", CHAT, body_for(CHAT, 2, model="no-such-model")),
        line("cross", CHAT, {**body_for(CHAT, 3), "model": MESSAGES_MODEL}),
    ]
    done = wait_ended(client, create(client, lines).id)
    assert done.status == "completed"  # whatever the items' results
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (1, 3)
    assert [o["custom_id"] for o in file_lines(client, done.output_file_id)] == ["ok"]
    errors = {item["custom_id"]: item for item in file_lines(client, done.error_file_id)}
    assert list(errors) == ["upstream", "routing", "cross"]  # line order
    upstream = errors["upstream"]
    assert upstream["error"] is None and upstream["response"]["status_code"] == 400
    assert upstream["response"]["request_id"]
    assert upstream["response"]["body"] == {
        "error": {"message": "upstream returned 400: Invalid request.", "type": "upstream_error"}
    }
    assert errors["routing"]["response"] is None and errors["routing"]["error"]["code"] == "routing_error"
    assert errors["routing"]["error"]["message"].startswith("routing: ")
    assert errors["cross"]["error"]["code"] == "cross_shape"
    assert errors["cross"]["error"]["message"].startswith("cross-shape dispatch: ")


def test_rate_limit_in_the_error_file(gateway: Gateway) -> None:
    gw = gateway
    s = gw.scenario(rules=[{"meter": "requests", "limit": 1, "window": "9999999s"}])
    client = sdk(gw, s.key)
    lines = [line(f"r{i}", CHAT, body_for(CHAT, i, model=s.model)) for i in range(3)]
    done = wait_ended(client, create(client, lines).id)
    assert done.request_counts is not None and done.request_counts.completed == 1
    errors = file_lines(client, done.error_file_id)
    assert len(errors) == 2
    assert {item["error"]["code"] for item in errors} == {"rate_limit_exceeded"}
    assert all(item["error"]["message"].startswith("rate limit exceeded: ") for item in errors)
