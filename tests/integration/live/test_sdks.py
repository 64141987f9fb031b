"""SPEC §7 over HTTP: the official OpenAI and Anthropic SDKs, unchanged, against Relay (chat, Responses,
embeddings, messages, and Relay's errors as the SDKs' typed exceptions) — on SQLite and on Postgres +
Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from relay.fake_upstream.embeddings import vector
from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import (
    CHAT_MODEL,
    CHAT_UPSTREAM,
    EMBED_MODEL,
    EMBED_UPSTREAM,
    HOST_ANTHROPIC,
    MESSAGES_MODEL,
    MESSAGES_UPSTREAM,
    RESPONSES_MODEL,
    Gateway,
)
from tests.integration.live.helpers import last_upstream

# --- the official SDKs, unchanged, against Relay -------------------------------------------------------

SDK_MESSAGES: Any = [{"role": "user", "content": "hello from the sdk"}]  # the SDKs' TypedDicts
SDK_REPLY = "Echo: hello from the sdk"


@pytest.fixture
def oai(gateway: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{gateway.url}/openai/v1", api_key=gateway.key, max_retries=0, timeout=30
    ) as client:
        yield client


@pytest.fixture
def ant(gateway: Gateway) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(
        base_url=f"{gateway.url}/anthropic", api_key=gateway.key, max_retries=0, timeout=30
    ) as client:
        yield client


def test_openai_sdk_chat(oai: openai.OpenAI, fake: FakeUpstream) -> None:
    completion = oai.chat.completions.create(model=CHAT_MODEL, messages=SDK_MESSAGES, temperature=0)
    assert completion.choices[0].message.content == SDK_REPLY
    assert completion.model == CHAT_UPSTREAM
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    stream = oai.chat.completions.create(model=CHAT_MODEL, messages=SDK_MESSAGES, stream=True)
    chunks = list(stream)
    assert len(chunks) >= 3
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SDK_REPLY
    assert all(c.usage is None for c in chunks)
    stream = oai.chat.completions.create(
        model=CHAT_MODEL,
        messages=SDK_MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 4
    received = fake.requests()
    assert [r["body"]["model"] for r in received] == [CHAT_UPSTREAM] * 3
    assert all(gateway_key_absent(r, oai.api_key) for r in received)


def gateway_key_absent(received: dict[str, Any], key: str) -> bool:
    return key not in json.dumps(received["headers"]) and key not in json.dumps(received["body"])


def test_openai_sdk_responses(oai: openai.OpenAI, fake: FakeUpstream) -> None:
    response = oai.responses.create(model=RESPONSES_MODEL, input="hello from the sdk")
    assert response.output_text == SDK_REPLY
    assert response.usage is not None and response.usage.output_tokens == 5
    events = list(oai.responses.create(model=RESPONSES_MODEL, input="hello from the sdk", stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == SDK_REPLY
    assert [r["path"] for r in fake.requests()] == ["/v1/responses"] * 2


def test_openai_sdk_embeddings(oai: openai.OpenAI, fake: FakeUpstream) -> None:
    result = oai.embeddings.create(
        model=EMBED_MODEL, input=["hello from the sdk", "again"]
    )  # base64 by default
    assert [d.embedding for d in result.data] == [vector("hello from the sdk"), vector("again")]
    assert result.usage.prompt_tokens == 5
    assert last_upstream(fake)["body"]["model"] == EMBED_UPSTREAM


def test_anthropic_sdk_messages(ant: anthropic.Anthropic, fake: FakeUpstream, gateway: Gateway) -> None:
    message = ant.messages.create(model=MESSAGES_MODEL, max_tokens=50, messages=SDK_MESSAGES)
    assert [block.type for block in message.content] == ["text"]
    assert getattr(message.content[0], "text", None) == SDK_REPLY
    assert message.usage.output_tokens == 5
    with ant.messages.stream(model=MESSAGES_MODEL, max_tokens=50, messages=SDK_MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == SDK_REPLY
    assert final.usage.output_tokens == 5 and final.stop_reason == "end_turn"
    for received in fake.requests():
        assert received["headers"]["x-api-key"] == gateway.host_key_values[HOST_ANTHROPIC]
        assert received["body"]["model"] == MESSAGES_UPSTREAM
        assert gateway_key_absent(received, gateway.key)


def test_sdk_errors_are_the_sdks_typed_exceptions(
    oai: openai.OpenAI, ant: anthropic.Anthropic, gateway: Gateway
) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        oai.chat.completions.create(model="no-such-model", messages=SDK_MESSAGES)
    assert not_found.value.status_code == 404
    assert not_found.value.code == "model_not_found"
    assert not_found.value.response.headers["x-relay-request-id"]
    with pytest.raises(anthropic.NotFoundError) as ant_not_found:
        ant.messages.create(model="no-such-model", max_tokens=10, messages=SDK_MESSAGES)
    assert ant_not_found.value.status_code == 404
    with pytest.raises(openai.AuthenticationError):
        oai.with_options(api_key="sk-relay-" + "x" * 43).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        ant.with_options(api_key="sk-relay-" + "x" * 43).messages.create(
            model=MESSAGES_MODEL,
            max_tokens=10,
            messages=SDK_MESSAGES,
        )
    with pytest.raises(openai.BadRequestError) as unsupported:  # translated, with no counterpart for n
        oai.chat.completions.create(model=MESSAGES_MODEL, messages=SDK_MESSAGES, n=2)
    assert unsupported.value.code == "unsupported_parameter"
    assert {m.id for m in oai.models.list()} >= {CHAT_MODEL, EMBED_MODEL, MESSAGES_MODEL, RESPONSES_MODEL}
