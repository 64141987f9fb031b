"""A script written for OpenAI's Batch API, run unchanged against Relay (SPEC §14 Batches): the SDK's
``files.create``, ``batches.create/retrieve/list/cancel`` and ``files.content`` for the three endpoints,
the Batch object's fields and timestamps, the output file's lines, usage, and one usage event per
line — on SQLite and Postgres (one relay per backend for the module)."""

from __future__ import annotations

import pytest

from tests.fixtures.live import Gateway
from tests.integration.batch_api.helpers import item_events
from tests.integration.openai_batches.helpers import (
    BATCH_FIELDS,
    body_for,
    create,
    file_lines,
    line,
    raw,
    sdk,
    wait_ended,
)

ENDPOINTS = ["/v1/chat/completions", "/v1/responses", "/v1/embeddings"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_batch_runs_to_completed_with_its_output_file(gateway: Gateway, endpoint: str) -> None:
    gw = gateway
    client = sdk(gw)
    lines = [line(f"req-{i}", endpoint, body_for(endpoint, i)) for i in range(3)]
    created = create(client, lines, endpoint, metadata={"job": "nightly"})
    assert created.id.startswith("batch_") and created.status == "validating"
    assert created.endpoint == endpoint and created.metadata == {"job": "nightly"}
    assert created.expires_at == created.created_at + 24 * 3600
    shown = raw(gw, "GET", f"/batches/{created.id}").json()
    assert set(shown) == BATCH_FIELDS, shown

    done = wait_ended(client, created.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (3, 3, 0)
    assert (
        done.in_progress_at is not None and done.finalizing_at is not None and done.completed_at is not None
    )
    assert done.created_at <= done.in_progress_at <= done.finalizing_at <= done.completed_at
    assert done.failed_at is None and done.cancelled_at is None and done.cancelling_at is None
    assert done.error_file_id is None  # nothing failed: no error file

    output = file_lines(client, done.output_file_id)
    assert [item["custom_id"] for item in output] == ["req-0", "req-1", "req-2"]
    for item in output:
        assert set(item) == {"id", "custom_id", "response", "error"} and item["error"] is None
        assert item["id"].startswith("batch_req_")
        assert item["response"]["status_code"] == 200 and item["response"]["request_id"]
        assert isinstance(item["response"]["body"], dict)
    info = client.files.retrieve(done.output_file_id)  # type: ignore[arg-type]
    assert info.purpose == "batch_output" and info.expires_at is None

    # One usage event per line, source batch, batch_idx = the line; usage sums the completed items'.
    events = item_events(gw, created.id, 3)
    assert sorted(events) == [0, 1, 2]
    assert {e["source"] for e in events.values()} == {"batch"}
    assert {e["batch_id"] for e in events.values()} == {created.id}
    assert {e["request_id"] for e in events.values()} == {o["response"]["request_id"] for o in output}
    assert done.usage is not None
    assert done.usage.input_tokens == sum(e["input_tokens"] for e in events.values())
    assert done.usage.output_tokens == sum(e["output_tokens"] for e in events.values())
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    assert done.usage.input_tokens > 0


@pytest.mark.parametrize("endpoint", ENDPOINTS[:2])
def test_usage_sums_the_reasoning_tokens_the_upstream_reported(gateway: Gateway, endpoint: str) -> None:
    """SPEC §14: ``usage.output_tokens_details.reasoning_tokens`` is the sum over the completed items of
    what their upstream answers reported (the fake's ``fake:reasoning=N``: 3 + 5 + none)."""
    gw = gateway
    client = sdk(gw)
    texts = ["ponder fake:reasoning=3", "deeply fake:reasoning=5", "quickly"]
    lines = []
    for i, text in enumerate(texts):
        body = body_for(endpoint, i)
        body.update(
            {"messages": [{"role": "user", "content": text}]} if "messages" in body else {"input": text}
        )
        lines.append(line(f"r-{i}", endpoint, body))
    done = wait_ended(client, create(client, lines, endpoint).id)
    assert done.status == "completed", done
    assert done.usage is not None
    assert done.usage.output_tokens_details.reasoning_tokens == 8
    events = item_events(gw, done.id, 3)
    assert [events[i]["reasoning_tokens"] for i in range(3)] == [3, 5, 0]
    assert done.usage.output_tokens == sum(e["output_tokens"] for e in events.values())


def test_list_auto_paginates_each_batch_once_newest_first(gateway: Gateway) -> None:
    gw = gateway
    key = gw.mint_key()[1]  # an owner of its own: exactly the batches made here
    client = sdk(gw, key)
    endpoint = ENDPOINTS[0]
    ids = [create(client, [line("a", endpoint, body_for(endpoint, i))]).id for i in range(5)]
    newest_first = list(reversed(ids))
    assert [b.id for b in client.batches.list(limit=2)] == newest_first
    first = raw(gw, "GET", "/batches", key, params={"limit": 2}).json()
    assert set(first) == {"object", "data", "first_id", "last_id", "has_more"}
    assert (first["object"], first["has_more"]) == ("list", True)
    assert (first["first_id"], first["last_id"]) == tuple(newest_first[:2])
    last = raw(gw, "GET", "/batches", key, params={"after": newest_first[2]}).json()
    assert [b["id"] for b in last["data"]] == newest_first[3:] and last["has_more"] is False
    # A §10 batch of the same owner is not in this list (it is in §10.10's list).
    native = gw.post("/v1/batches", {"shape": "openai", "requests": [body_for(endpoint, 0)]}, key=key)
    assert native.status_code == 202
    assert native.json()["id"] not in {b.id for b in client.batches.list()}
    every = gw.client.get("/v1/batches", headers=gw.auth(key)).json()["batches"]
    assert set(ids) <= {b["ID"] for b in every}
    for bad in ("0", "101", "x", ""):
        answer = raw(gw, "GET", "/batches", key, params={"limit": bad})
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "limit", bad
