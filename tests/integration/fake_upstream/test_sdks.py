"""The official SDKs parse everything the fake sends (they are what gateway users will point at Relay)."""

from __future__ import annotations

import pytest

from tests.fixtures.fake_upstream import FakeUpstream

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

MESSAGES = [{"role": "user", "content": "hello from the sdk"}]
REPLY = "Echo: hello from the sdk"


@pytest.fixture
def oai(fake: FakeUpstream):  # type: ignore[no-untyped-def]
    with openai.OpenAI(base_url=fake.base_url + "/v1", api_key="sk-sdk", max_retries=0) as client:
        yield client


@pytest.fixture
def ant(fake: FakeUpstream):  # type: ignore[no-untyped-def]
    with anthropic.Anthropic(base_url=fake.base_url, api_key="sk-ant-sdk", max_retries=0) as client:
        yield client


def test_openai_chat(oai) -> None:  # type: ignore[no-untyped-def]
    completion = oai.chat.completions.create(model="gpt-x", messages=MESSAGES)
    assert completion.model == "gpt-x"
    assert completion.choices[0].message.content == REPLY
    assert completion.usage.prompt_tokens == 4
    assert completion.usage.completion_tokens == 5


def test_openai_chat_stream(oai) -> None:  # type: ignore[no-untyped-def]
    stream = oai.chat.completions.create(
        model="gpt-x", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLY
    assert chunks[-1].usage.total_tokens == 9


def test_openai_responses(oai) -> None:  # type: ignore[no-untyped-def]
    response = oai.responses.create(model="gpt-r", input="hello from the sdk", instructions="be kind")
    assert response.output_text == REPLY
    assert response.model == "gpt-r"
    assert response.usage.input_tokens == 6
    assert response.usage.output_tokens == 5


def test_openai_responses_stream(oai) -> None:  # type: ignore[no-untyped-def]
    events = list(oai.responses.create(model="gpt-r", input=MESSAGES, stream=True))
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == REPLY
    assert events[-1].response.output_text == REPLY
    with oai.responses.stream(model="gpt-r", input=MESSAGES) as stream:
        final = stream.get_final_response()
    assert final.output_text == REPLY


def test_openai_embeddings_default_base64(oai) -> None:  # type: ignore[no-untyped-def]
    from relay.fake_upstream.embeddings import vector

    result = oai.embeddings.create(model="emb", input=["one", "two words"])
    assert [d.embedding for d in result.data] == [vector("one"), vector("two words")]
    assert result.usage.prompt_tokens == 3
    floats = oai.embeddings.create(model="emb", input="one", encoding_format="float")
    assert floats.data[0].embedding == vector("one")


def test_anthropic_messages(ant) -> None:  # type: ignore[no-untyped-def]
    message = ant.messages.create(model="claude-x", max_tokens=64, messages=MESSAGES)
    assert message.model == "claude-x"
    assert message.content[0].text == REPLY
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 4 and message.usage.output_tokens == 5


def test_anthropic_messages_stream(ant) -> None:  # type: ignore[no-untyped-def]
    with ant.messages.stream(model="claude-x", max_tokens=64, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == REPLY
    assert final.content[0].text == REPLY
    assert final.usage.output_tokens == 5
    raw = list(ant.messages.create(model="claude-x", max_tokens=64, messages=MESSAGES, stream=True))
    assert [e.type for e in raw][:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert raw[-1].type == "message_stop"


def test_sdk_errors_are_typed(oai, ant) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(openai.RateLimitError) as oai_error:
        oai.chat.completions.create(model="m", messages=MESSAGES, extra_body={"fake": {"status": 429}})
    assert oai_error.value.response.headers["retry-after"] == "1"
    assert oai_error.value.body["type"] == "requests"
    with pytest.raises(anthropic.InternalServerError) as ant_error:
        ant.messages.create(model="c", max_tokens=5, messages=MESSAGES, extra_body={"fake": {"status": 500}})
    assert ant_error.value.body["error"]["type"] == "api_error"
    with pytest.raises(openai.APIConnectionError):
        oai.with_options(api_key="fail-conn-1").chat.completions.create(model="m", messages=MESSAGES)
