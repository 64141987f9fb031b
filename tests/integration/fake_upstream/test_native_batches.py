"""The fake's native batch APIs, driven by the official ``openai`` and ``anthropic`` SDKs (what Relay's
offload speaks to a provider): OpenAI files + batches and Anthropic message batches, with per-line
failures, cancel, expiry, a refusal at create and an outage while polling."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

OPENAI_ORDER = ["validating", "in_progress", "finalizing", "completed"]


@pytest.fixture
def oai(fake: FakeUpstream):  # type: ignore[no-untyped-def]
    with openai.OpenAI(base_url=fake.base_url + "/v1", api_key="sk-sdk", max_retries=0) as client:
        yield client


@pytest.fixture
def ant(fake: FakeUpstream):  # type: ignore[no-untyped-def]
    with anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-sdk", max_retries=0) as client:
        yield client


def chat_line(custom_id: str, text: str) -> dict[str, Any]:
    body = {"model": "gpt-x", "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def openai_batch(oai: Any, lines: list[dict[str, Any]]) -> Any:
    content = "".join(json.dumps(line) + "\n" for line in lines).encode()
    uploaded = oai.files.create(file=("input.jsonl", content), purpose="batch")
    assert uploaded.object == "file" and uploaded.bytes == len(content) and uploaded.purpose == "batch"
    return oai.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )


def rows(oai: Any, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [json.loads(line) for line in oai.files.content(file_id).text.splitlines()]


def test_openai_batch_completes_with_per_line_successes_and_failures(oai: Any) -> None:
    lines = [chat_line("a", "hello"), chat_line("b", "please fake:batch_fail"), chat_line("c", "bye")]
    created = openai_batch(oai, lines)
    assert created.status == "validating" and created.request_counts.total == 3
    assert created.output_file_id is None and created.endpoint == "/v1/chat/completions"

    batch = oai.batches.retrieve(created.id)
    assert batch.status == "completed" and batch.completed_at is not None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (
        3,
        2,
        1,
    )
    outputs = rows(oai, batch.output_file_id)
    assert [row["custom_id"] for row in outputs] == ["a", "c"]
    assert outputs[0]["response"]["status_code"] == 200 and outputs[0]["error"] is None
    assert outputs[0]["response"]["body"]["object"] == "chat.completion"
    assert outputs[0]["response"]["body"]["choices"][0]["message"]["content"] == "Echo: hello"
    assert outputs[0]["id"].startswith("batch_req_") and outputs[0]["response"]["request_id"].startswith(
        "req_"
    )
    (failed,) = rows(oai, batch.error_file_id)
    assert failed["custom_id"] == "b" and failed["response"]["status_code"] == 400
    assert failed["response"]["body"]["error"]["type"] == "invalid_request_error"


def test_openai_batch_moves_through_its_states_in_order(oai: Any, fake: FakeUpstream) -> None:
    fake.configure(batch_phase_ms=150)
    created = openai_batch(oai, [chat_line(f"r{i}", f"line {i}") for i in range(20)])
    seen = [created.status]
    deadline = time.monotonic() + 30
    while seen[-1] != "completed" and time.monotonic() < deadline:
        time.sleep(0.02)
        status = oai.batches.retrieve(created.id).status
        if status != seen[-1]:
            seen.append(status)
    assert seen[-1] == "completed"
    assert seen == sorted(seen, key=OPENAI_ORDER.index)  # never backwards, whatever was skipped
    assert len(rows(oai, oai.batches.retrieve(created.id).output_file_id)) == 20


def test_openai_bad_input_lines_fail_the_batch_naming_the_line(oai: Any) -> None:
    good = chat_line("a", "hello")
    created = openai_batch(oai, [good, {**good, "custom_id": "b", "url": "/v1/embeddings"}, good])
    batch = oai.batches.retrieve(created.id)
    assert batch.status == "failed" and batch.failed_at is not None
    assert [(e.code, e.line) for e in batch.errors.data] == [
        ("mismatched_url", 2),
        ("duplicate_custom_id", 3),
    ]
    assert batch.output_file_id is None and batch.error_file_id is None


def test_openai_cancel_and_expiry_leave_every_unrun_line_in_the_error_file(
    oai: Any, fake: FakeUpstream
) -> None:
    fake.configure(batch_phase_ms=600_000)
    created = openai_batch(oai, [chat_line("a", "x"), chat_line("b", "y")])
    cancelling = oai.batches.cancel(created.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    cancelled = oai.batches.retrieve(created.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
    assert cancelled.output_file_id is None
    assert [(r["custom_id"], r["error"]["code"]) for r in rows(oai, cancelled.error_file_id)] == [
        ("a", "batch_cancelled"),
        ("b", "batch_cancelled"),
    ]
    with pytest.raises(openai.BadRequestError):
        oai.batches.cancel(created.id)

    fake.configure(batch_expire_ms=0)
    expired = oai.batches.retrieve(openai_batch(oai, [chat_line("a", "x")]).id)
    assert expired.status == "expired" and expired.expired_at is not None
    assert [r["error"]["code"] for r in rows(oai, expired.error_file_id)] == ["batch_expired"]


def test_refusal_at_create_and_an_outage_while_polling(oai: Any, ant: Any, fake: FakeUpstream) -> None:
    created = openai_batch(oai, [chat_line("a", "x")])
    fake.configure(batch_refuse_status=400)
    with pytest.raises(openai.BadRequestError):
        openai_batch(oai, [chat_line("a", "x")])
    with pytest.raises(anthropic.BadRequestError):
        ant.messages.batches.create(requests=[message_request("a", "x")])
    fake.configure(batch_refuse_status=None, batch_poll_status=503)
    with pytest.raises(openai.InternalServerError):
        oai.batches.retrieve(created.id)
    fake.configure(batch_poll_status=None)
    assert oai.batches.retrieve(created.id).status == "completed"


def message_request(custom_id: str, text: str) -> dict[str, Any]:
    params = {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "params": params}


def test_anthropic_batch_ends_with_per_request_results(ant: Any) -> None:
    requests = [
        message_request("a", "hello"),
        message_request("b", "fake:batch_fail"),
        message_request("c", "bye"),
    ]
    created = ant.messages.batches.create(requests=requests)
    assert created.type == "message_batch" and created.processing_status == "in_progress"
    assert created.request_counts.processing == 3 and created.results_url is None

    batch = ant.messages.batches.retrieve(created.id)
    assert batch.processing_status == "ended" and batch.ended_at is not None
    assert (
        batch.request_counts.succeeded,
        batch.request_counts.errored,
        batch.request_counts.processing,
    ) == (2, 1, 0)
    results = {r.custom_id: r.result for r in ant.messages.batches.results(created.id)}
    assert results["a"].type == "succeeded" and results["a"].message.content[0].text == "Echo: hello"
    assert results["b"].type == "errored" and results["b"].error.error.type == "invalid_request_error"
    assert results["c"].type == "succeeded"


def test_anthropic_cancel_and_expiry(ant: Any, fake: FakeUpstream) -> None:
    fake.configure(batch_phase_ms=600_000)
    created = ant.messages.batches.create(requests=[message_request("a", "x"), message_request("b", "y")])
    canceling = ant.messages.batches.cancel(created.id)
    assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
    ended = ant.messages.batches.retrieve(created.id)
    assert ended.processing_status == "ended" and ended.request_counts.canceled == 2
    assert [r.result.type for r in ant.messages.batches.results(created.id)] == ["canceled", "canceled"]

    fake.configure(batch_expire_ms=0)
    expired = ant.messages.batches.create(requests=[message_request("a", "x")])
    assert ant.messages.batches.retrieve(expired.id).request_counts.expired == 1
    assert [r.result.type for r in ant.messages.batches.results(expired.id)] == ["expired"]
