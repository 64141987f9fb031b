"""Relay's provider batch API clients (SPEC §22: ``batches/offload/openai_api``, ``anthropic_api``)
against the fake upstream's native batch APIs over loopback, with Relay's own HTTP client: a batch
is created, polled to its end and its lines mapped into the engine's terms (completed with the
provider's body, discarded with §10.4's error text, cancelled or expired when never run); cancel
is forwarded; a 4xx at create is a refusal carrying the reason; an outage while polling is
"try again", never a result."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from relay.batches.offload.anthropic_api import AnthropicBatchAPI
from relay.batches.offload.openai_api import OpenAIBatchAPI
from relay.batches.offload.provider import (
    ProviderBatch,
    ProviderBatchAPI,
    ProviderRefused,
    ProviderUnavailable,
)
from relay.upstream import Upstream
from tests.fixtures.fake_upstream import FakeUpstream

KEY = "sk-offload-secret-key"


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    client = Upstream(timeout_s=30)
    await client.start()
    try:
        yield client
    finally:
        await client.close()


def chat(text: str) -> bytes:
    return orjson.dumps({"model": "gpt-x", "messages": [{"role": "user", "content": text}]})


def message(text: str) -> bytes:
    return orjson.dumps(
        {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
    )


APIS: dict[str, tuple[Any, str, Any]] = {
    "openai": (OpenAIBatchAPI, "/v1/chat/completions", chat),
    "anthropic": (AnthropicBatchAPI, "/v1/messages", message),
}


def api_for(name: str, upstream: Upstream, fake: FakeUpstream) -> tuple[ProviderBatchAPI, str, Any]:
    cls, endpoint, body = APIS[name]
    return cls(upstream, fake.base_url, KEY), endpoint, body


async def until_ended(api: ProviderBatchAPI, batch: ProviderBatch) -> ProviderBatch:
    for _ in range(500):
        if batch.ending is not None:
            return batch
        await asyncio.sleep(0.01)
        batch = await api.poll(batch.id)
    raise AssertionError(f"batch {batch.id} never ended: {batch}")


@pytest.mark.parametrize("name", APIS)
async def test_a_batch_runs_to_its_end_with_per_line_successes_and_failures(
    name: str, upstream: Upstream, fake: FakeUpstream
) -> None:
    api, endpoint, body = api_for(name, upstream, fake)
    created = await api.create(
        endpoint, [("item-0", body("hello")), ("item-1", body("x fake:batch_fail")), ("item-2", body("bye"))]
    )
    assert created.ending is None and created.total == 3 and created.done == 0
    ended = await until_ended(api, created)
    assert ended.ending == "completed" and (ended.done, ended.total) == (3, 3)
    lines = {line.custom_id: line async for line in api.results(ended)}
    assert sorted(lines) == ["item-0", "item-1", "item-2"]
    assert lines["item-0"].state == "completed" and lines["item-0"].status == 200
    reply = orjson.loads(lines["item-0"].body or b"")
    text = reply["choices"][0]["message"]["content"] if name == "openai" else reply["content"][0]["text"]
    assert text == "Echo: hello"
    failed = lines["item-1"]
    assert failed.state == "discarded" and failed.status == 400 and failed.body is None
    assert failed.error is not None and failed.error.startswith("upstream returned 400: fake:batch_fail")
    # The key went out as the provider wants it, and nowhere else.
    sent = fake.requests()
    assert all(KEY in str(r["headers"]) for r in sent)
    assert all(KEY not in (line.error or "") for line in lines.values())


@pytest.mark.parametrize("name", APIS)
async def test_cancel_is_forwarded_and_unrun_lines_are_cancelled(
    name: str, upstream: Upstream, fake: FakeUpstream
) -> None:
    fake.configure(batch_phase_ms=600_000)
    api, endpoint, body = api_for(name, upstream, fake)
    created = await api.create(endpoint, [("a", body("x")), ("b", body("y"))])
    cancelling = await api.cancel(created.id)
    assert cancelling.state in ("cancelling", "canceling")
    ended = await until_ended(api, cancelling)
    assert ended.ending == "cancelled"
    lines = [line async for line in api.results(ended)]
    assert sorted((line.custom_id, line.state, line.error) for line in lines) == [
        ("a", "cancelled", "cancelled"),
        ("b", "cancelled", "cancelled"),
    ]


@pytest.mark.parametrize("name", APIS)
async def test_expiry_ends_the_batch_and_names_it_on_every_unrun_line(
    name: str, upstream: Upstream, fake: FakeUpstream
) -> None:
    fake.configure(batch_phase_ms=600_000, batch_expire_ms=0)
    api, endpoint, body = api_for(name, upstream, fake)
    ended = await until_ended(api, await api.create(endpoint, [("a", body("x"))]))
    assert ended.ending == "expired"
    (line,) = [line async for line in api.results(ended)]
    assert line.state == "cancelled" and (line.error or "").startswith("expired: ")


@pytest.mark.parametrize("name", APIS)
async def test_a_refusal_at_create_carries_the_reason_and_an_outage_is_retryable(
    name: str, upstream: Upstream, fake: FakeUpstream
) -> None:
    api, endpoint, body = api_for(name, upstream, fake)
    created = await api.create(endpoint, [("a", body("x"))])
    fake.configure(batch_refuse_status=400)
    with pytest.raises(ProviderRefused) as refused:
        await api.create(endpoint, [("a", body("x"))])
    assert refused.value.status == 400 and refused.value.reason.startswith("upstream returned 400")
    assert KEY not in refused.value.reason

    ended = await until_ended(api, created)
    fake.configure(batch_refuse_status=None, batch_poll_status=503)
    with pytest.raises(ProviderUnavailable):
        await api.poll(created.id)
    with pytest.raises(ProviderUnavailable):  # reading the results during the outage: nothing mapped
        _ = [line async for line in api.results(ended)]
    fake.configure(batch_poll_status=None)
    assert (await api.poll(created.id)).ending == "completed"
    assert [line.state async for line in api.results(ended)] == ["completed"]


async def test_a_connection_error_is_retryable(upstream: Upstream) -> None:
    api = OpenAIBatchAPI(upstream, "http://127.0.0.1:9", KEY)  # the discard port: nothing listens
    with pytest.raises(ProviderUnavailable):
        await api.poll("batch_x")


async def test_openai_input_file_refused_at_validation_ends_failed(
    upstream: Upstream, fake: FakeUpstream
) -> None:
    api = OpenAIBatchAPI(upstream, fake.base_url, KEY)
    ended = await until_ended(
        api, await api.create("/v1/chat/completions", [("a", chat("x")), ("a", chat("y"))])
    )
    assert ended.ending == "failed" and ended.failure is not None and "line 2" in ended.failure
