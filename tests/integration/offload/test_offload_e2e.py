"""Provider batch offload end to end (SPEC §22): the official ``openai`` and ``anthropic`` SDKs against
``relay serve`` on SQLite and on Postgres + Redis, the fake upstream's native batch APIs running the
offloaded batches. An offloaded batch reads exactly as a gateway-run batch of the same input (ids and
timestamps aside); cancel and expiry are forwarded; a refusal runs it on Relay's workers; an outage
while polling is waited out; each item has one usage event, ``offloaded``, at the discounted price;
a budget that cannot take the batch refuses it at submit."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import openai
import pytest
from sqlalchemy import update

from relay.store import tables as t
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.integration.batch_api.helpers import item_events
from tests.integration.message_batches.helpers import sdk as anthropic_sdk
from tests.integration.message_batches.helpers import wait_ended as anthropic_ended
from tests.integration.offload.helpers import (
    DISCOUNT,
    Offload,
    admin_batch,
    offload_scenario,
    shape,
    wait_offload,
)
from tests.integration.openai_batches.helpers import create, file_lines, line
from tests.integration.openai_batches.helpers import sdk as openai_sdk
from tests.integration.openai_batches.helpers import wait_ended as openai_ended

CHAT = "/v1/chat/completions"


@pytest.fixture
def sc(gw: Gateway) -> Offload:
    return offload_scenario(gw)


@pytest.fixture(autouse=True)
def fake_reset(fake: FakeUpstream) -> FakeUpstream:
    return fake  # the ``fake`` fixture resets the knobs before each test


def chat_lines(model: str, n: int, *, failing: int | None = None) -> list[dict[str, Any]]:
    lines = []
    for i in range(n):
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": f"item {i}"}]}
        if i == failing:  # the native batch API fails the text, the live endpoint the fake field
            body["messages"][0]["content"] = "fake:batch_fail please"
            body["fake"] = {"status": 400}
        lines.append(line(f"req-{i}", CHAT, body))
    return lines


def message_requests(model: str, n: int, *, failing: int | None = None) -> list[dict[str, Any]]:
    requests = []
    for i in range(n):
        params: dict[str, Any] = {
            "model": model,
            "max_tokens": 32,
            "messages": [{"role": "user", "content": f"request {i}"}],
        }
        if i == failing:
            params["messages"][0]["content"] = "fake:batch_fail please"
            params["fake"] = {"status": 400}
        requests.append({"custom_id": f"r-{i}", "params": params})
    return requests


def events_of(gw: Gateway, batch_id: str, n: int) -> dict[int, dict[str, Any]]:
    events = item_events(gw, batch_id, n)
    time.sleep(0.5)  # a second mapping would have written more by now
    assert len(item_events(gw, batch_id, n)) == n
    return events


def test_openai_offloaded_batch_reads_as_a_gateway_run_one(
    gw: Gateway, sc: Offload, fake: FakeUpstream
) -> None:
    client = openai_sdk(gw, sc.key)
    offloaded = create(client, chat_lines(sc.chat, 4, failing=2))
    gateway_run = create(client, chat_lines(sc.chat_twin, 4, failing=2))
    view = wait_offload(gw, offloaded.id)
    assert view["offloaded"] is True and view["offload"]["provider_batch_id"].startswith("batch_")
    assert admin_batch(gw, gateway_run.id)["offload"] is None
    assert any(r["path"] == "/v1/batches" for r in fake.requests(500))

    done, twin = openai_ended(client, offloaded.id), openai_ended(client, gateway_run.id)
    assert done.status == twin.status == "completed"
    assert done.request_counts == twin.request_counts and done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 1)
    files = {"input_file_id", "output_file_id", "error_file_id"}
    assert shape(done.model_dump(exclude=files)) == shape(twin.model_dump(exclude=files))
    stamps = {k for k, v in done.model_dump().items() if k.endswith("_at") and v is not None}
    assert stamps == {k for k, v in twin.model_dump().items() if k.endswith("_at") and v is not None}
    output, twin_output = file_lines(client, done.output_file_id), file_lines(client, twin.output_file_id)
    assert [o["custom_id"] for o in output] == ["req-0", "req-1", "req-3"]
    assert shape(output) == shape(twin_output)
    errors, twin_errors = file_lines(client, done.error_file_id), file_lines(client, twin.error_file_id)
    assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [("req-2", 400)]
    assert shape(errors)[0].keys() == shape(twin_errors)[0].keys()
    assert errors[0]["response"]["body"]["error"].keys() == twin_errors[0]["response"]["body"]["error"].keys()

    # One usage event per item, offloaded, priced at the discount of what Relay charged for the twin.
    events, twin_events = events_of(gw, offloaded.id, 4), events_of(gw, gateway_run.id, 4)
    assert {e["offloaded"] for e in events.values()} == {True}
    assert {e["offloaded"] for e in twin_events.values()} == {False}
    for idx in (0, 1, 3):
        assert events[idx]["input_tokens"] == twin_events[idx]["input_tokens"] > 0
        assert events[idx]["cost_nanos"] == round(twin_events[idx]["cost_nanos"] * DISCOUNT)
    assert events[2]["error_kind"] == "upstream_status" and events[2]["cost_nanos"] is None
    assert events[2]["status"] == 400


def test_anthropic_offloaded_batch_reads_as_a_gateway_run_one(gw: Gateway, sc: Offload) -> None:
    client = anthropic_sdk(gw, sc.key)
    offloaded = client.messages.batches.create(requests=message_requests(sc.messages, 3, failing=1))  # type: ignore[arg-type]
    gateway_run = client.messages.batches.create(requests=message_requests(sc.messages_twin, 3, failing=1))  # type: ignore[arg-type]
    assert wait_offload(gw, offloaded.id)["offload"]["provider_batch_id"].startswith("msgbatch_")
    done, twin = anthropic_ended(client, offloaded.id, 3), anthropic_ended(client, gateway_run.id, 3)
    assert done.request_counts == twin.request_counts
    assert (done.request_counts.succeeded, done.request_counts.errored) == (2, 1)
    results = {r.custom_id: r.model_dump() for r in client.messages.batches.results(offloaded.id)}
    twin_results = {r.custom_id: r.model_dump() for r in client.messages.batches.results(gateway_run.id)}
    assert sorted(results) == ["r-0", "r-1", "r-2"]
    for custom_id in ("r-0", "r-2"):
        assert results[custom_id]["result"]["type"] == "succeeded"
        assert shape(results[custom_id]) == shape(twin_results[custom_id])
    assert results["r-1"]["result"]["type"] == twin_results["r-1"]["result"]["type"] == "errored"
    events = events_of(gw, offloaded.id, 3)
    assert {e["offloaded"] for e in events.values()} == {True}
    assert events[0]["cost_nanos"] > 0


def test_cancel_is_forwarded_and_unrun_items_end_cancelled(
    gw: Gateway, sc: Offload, fake: FakeUpstream
) -> None:
    fake.configure(batch_phase_ms=600_000)
    client = openai_sdk(gw, sc.key)
    batch = create(client, chat_lines(sc.chat, 3))
    wait_offload(gw, batch.id)
    assert client.batches.cancel(batch.id).status in ("cancelling", "cancelled")
    ended = openai_ended(client, batch.id)
    assert ended.status == "cancelled"
    assert any(r["path"].endswith("/cancel") for r in fake.requests(500))
    events = events_of(gw, batch.id, 3)
    assert {e["error_kind"] for e in events.values()} == {"cancelled"}
    assert {e["offloaded"] for e in events.values()} == {True}

    aclient = anthropic_sdk(gw, sc.key)
    message_batch = aclient.messages.batches.create(requests=message_requests(sc.messages, 2))  # type: ignore[arg-type]
    wait_offload(gw, message_batch.id)
    aclient.messages.batches.cancel(message_batch.id)
    ended_m = anthropic_ended(aclient, message_batch.id, 2)
    assert ended_m.request_counts.canceled == 2


def test_expiry_is_forwarded_and_unrun_items_end_expired(
    gw: Gateway, sc: Offload, fake: FakeUpstream
) -> None:
    fake.configure(batch_phase_ms=600_000)
    client = openai_sdk(gw, sc.key)
    batch = create(client, chat_lines(sc.chat, 2))
    wait_offload(gw, batch.id)
    gw.sql(update(t.batches).where(t.batches.c.id == batch.id).values(expires_at=t.batches.c.created_at))
    ended = openai_ended(client, batch.id)
    assert ended.status == "expired"
    events = events_of(gw, batch.id, 2)
    assert {e["error_kind"] for e in events.values()} == {"expired"}
    assert all(e["error_message"].startswith("expired: batch expired at ") for e in events.values())


def test_a_refused_batch_runs_on_relays_workers_with_the_reason(
    gw: Gateway, sc: Offload, fake: FakeUpstream
) -> None:
    fake.configure(batch_refuse_status=400)
    client = openai_sdk(gw, sc.key)
    batch = create(client, chat_lines(sc.chat, 2))
    ended = openai_ended(client, batch.id)
    assert ended.status == "completed" and ended.request_counts is not None
    assert ended.request_counts.completed == 2
    view = admin_batch(gw, batch.id)
    assert view["offload"]["reason"].startswith("upstream returned 400")
    assert view["offload"]["provider_batch_id"] is None
    events = events_of(gw, batch.id, 2)
    assert {e["offloaded"] for e in events.values()} == {False}


def test_an_outage_while_polling_is_waited_out(gw: Gateway, sc: Offload, fake: FakeUpstream) -> None:
    client = openai_sdk(gw, sc.key)
    fake.configure(batch_phase_ms=300)
    batch = create(client, chat_lines(sc.chat, 3))
    wait_offload(gw, batch.id)
    fake.configure(batch_poll_status=503)
    time.sleep(1.5)  # several rounds meet the outage
    assert client.batches.retrieve(batch.id).status == "in_progress"
    assert admin_batch(gw, batch.id)["completed_at"] is None
    fake.configure(batch_poll_status=None)
    ended = openai_ended(client, batch.id, timeout=30)
    assert ended.status == "completed"
    events = events_of(gw, batch.id, 3)
    assert {e["status"] for e in events.values()} == {200}


def test_a_budget_that_cannot_take_the_batch_refuses_it_at_submit(gw: Gateway) -> None:
    tight = offload_scenario(gw, rules=[{"meter": "cost_usd", "limit": "0.000001", "window": "1d"}])
    client = openai_sdk(gw, tight.key)
    before = gw.sql(
        t.batches.select().with_only_columns(t.batches.c.id).order_by(t.batches.c.created_at.desc()).limit(1)
    )
    with pytest.raises(openai.RateLimitError) as refused:
        create(client, chat_lines(tight.chat, 3))
    assert "budget exceeded" in str(refused.value)
    after = gw.sql(
        t.batches.select().with_only_columns(t.batches.c.id).order_by(t.batches.c.created_at.desc()).limit(1)
    )
    assert before == after  # nothing written

    aclient = anthropic_sdk(gw, tight.key)
    with pytest.raises(anthropic.RateLimitError):
        aclient.messages.batches.create(requests=message_requests(tight.messages, 2))  # type: ignore[arg-type]
    # The twin runs on Relay: the budget is checked per call there, not against an estimate.
    ok = create(client, chat_lines(tight.chat_twin, 1))
    assert ok.status == "validating"
