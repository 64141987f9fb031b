"""SPEC §19 with the official SDKs, both shapes, whole and streamed: a miss goes upstream and is kept, a
hit answers the same content with no upstream call, as SSE when the request streams (whichever way
the entry was stored), with ``X-Relay-Cache`` saying which."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.live import Gateway
from tests.integration.cache.helpers import ant, cached_scenario, oai, upstream_calls, words


def chat_whole(gateway: Gateway, key: str, model: str, prompt: str) -> tuple[str, str, Any]:
    with oai(gateway, key) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": prompt}], temperature=0
        )
        completion = raw.parse()
    return raw.headers["x-relay-cache"], completion.choices[0].message.content or "", completion.usage


def chat_streamed(
    gateway: Gateway, key: str, model: str, prompt: str, *, include_usage: bool = False
) -> tuple[str, str, Any]:
    options: Any = {"include_usage": True} if include_usage else None
    with (
        oai(gateway, key) as client,
        client.chat.completions.with_streaming_response.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            temperature=0,
            stream=True,
            **({"stream_options": options} if options else {}),
        ) as response,
    ):
        header = response.headers["x-relay-cache"]
        chunks = list(response.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = next((c.usage for c in chunks if c.usage is not None), None)
    return header, text, usage


def messages_whole(gateway: Gateway, key: str, model: str, prompt: str) -> tuple[str, str, Any]:
    with ant(gateway, key) as client:
        raw = client.messages.with_raw_response.create(
            model=model, max_tokens=100, messages=[{"role": "user", "content": prompt}]
        )
        message = raw.parse()
    text = "".join(getattr(block, "text", "") for block in message.content)
    return raw.headers["x-relay-cache"], text, message.usage


def messages_streamed(gateway: Gateway, key: str, model: str, prompt: str) -> tuple[str, str, Any]:
    with (
        ant(gateway, key) as client,
        client.messages.with_streaming_response.create(
            model=model, max_tokens=100, messages=[{"role": "user", "content": prompt}], stream=True
        ) as response,
    ):
        header = response.headers["x-relay-cache"]
        events = list(response.parse())
    text = "".join(
        e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    usage = next((e.usage for e in events if e.type == "message_delta"), None)
    assert events[-1].type == "message_stop"
    return header, text, usage


@pytest.mark.parametrize("first_streamed", [False, True], ids=["stored-whole", "stored-streamed"])
def test_openai_chat_hit_and_miss_whole_and_streamed(
    gateway: Gateway, fake: FakeUpstream, first_streamed: bool
) -> None:
    s = cached_scenario(gateway)
    prompt = words()
    first = chat_streamed if first_streamed else chat_whole
    header, reply, _ = first(gateway, s.key, s.model, prompt)
    assert header == "miss" and reply.startswith("Echo:")
    assert upstream_calls(fake, s.model) == 1

    assert chat_whole(gateway, s.key, s.model, prompt)[:2] == ("hit", reply)
    header, text, usage = chat_streamed(gateway, s.key, s.model, prompt, include_usage=True)
    assert (header, text) == ("hit", reply)
    assert usage is not None and usage.completion_tokens > 0  # asked for: the stored counts
    assert chat_streamed(gateway, s.key, s.model, prompt)[:2] == ("hit", reply)
    assert upstream_calls(fake, s.model) == 1

    # Another body is another entry.
    assert chat_whole(gateway, s.key, s.model, words())[0] == "miss"
    assert upstream_calls(fake, s.model) == 2


@pytest.mark.parametrize("first_streamed", [False, True], ids=["stored-whole", "stored-streamed"])
def test_anthropic_messages_hit_and_miss_whole_and_streamed(
    gateway: Gateway, fake: FakeUpstream, first_streamed: bool
) -> None:
    s = cached_scenario(gateway, adapter="anthropic")
    prompt = words()
    first = messages_streamed if first_streamed else messages_whole
    header, reply, _ = first(gateway, s.key, s.model, prompt)
    assert header == "miss" and reply.startswith("Echo:")

    header, text, usage = messages_whole(gateway, s.key, s.model, prompt)
    assert (header, text) == ("hit", reply) and usage.output_tokens > 0
    header, text, usage = messages_streamed(gateway, s.key, s.model, prompt)
    assert (header, text) == ("hit", reply) and usage is not None and usage.output_tokens > 0
    assert upstream_calls(fake, s.model) == 1


def test_a_translated_request_is_kept_in_the_callers_shape(gateway: Gateway, fake: FakeUpstream) -> None:
    """An OpenAI caller of an Anthropic-bound model: the entry is the OpenAI answer it got (§7.3)."""
    s = cached_scenario(gateway, adapter="anthropic")
    prompt = words()
    header, reply, _ = chat_whole(gateway, s.key, s.model, prompt)
    assert header == "miss" and reply.startswith("Echo:")
    assert chat_streamed(gateway, s.key, s.model, prompt)[:2] == ("hit", reply)
    # The Anthropic shape is another route shape: its own entry.
    assert messages_whole(gateway, s.key, s.model, prompt)[0] == "miss"
    assert upstream_calls(fake, s.model) == 2


def test_route_aliases_share_entries_and_the_end_user_is_not_part_of_the_key(
    gateway: Gateway, fake: FakeUpstream
) -> None:
    s = cached_scenario(gateway)
    body = {"model": s.model, "messages": [{"role": "user", "content": words()}], "user": "alice"}
    first = gateway.post("/openai/v1/chat/completions", body, key=s.key)
    assert first.status_code == 200 and first.headers["x-relay-cache"] == "miss"
    again = gateway.post("/v1/chat/completions", {**body, "user": "bob"}, key=s.key)
    assert again.headers["x-relay-cache"] == "hit"
    assert again.json()["choices"] == first.json()["choices"]
    assert upstream_calls(fake, s.model) == 1


def test_a_policy_without_a_cache_answers_no_cache_header(gateway: Gateway, fake: FakeUpstream) -> None:
    s = gateway.scenario()
    body = {"model": s.model, "messages": [{"role": "user", "content": words()}]}
    for _ in range(2):
        response = gateway.post("/v1/chat/completions", body, key=s.key)
        assert response.status_code == 200 and "x-relay-cache" not in response.headers
    assert upstream_calls(fake, s.model) == 2


def test_openai_responses_hit_whole_and_streamed(gateway: Gateway, fake: FakeUpstream) -> None:
    """The Responses shape: a whole miss, then a whole hit and a streamed hit replayed as
    ``response.*`` events that the SDK folds into the same text."""
    s = cached_scenario(gateway, adapter="openai_responses")
    prompt = words()
    with oai(gateway, s.key) as client:
        raw = client.responses.with_raw_response.create(model=s.model, input=prompt)
        first = raw.parse()
        assert raw.headers["x-relay-cache"] == "miss" and first.output_text.startswith("Echo:")
        again = client.responses.with_raw_response.create(model=s.model, input=prompt)
        assert again.headers["x-relay-cache"] == "hit" and again.parse().output_text == first.output_text
        with client.responses.with_streaming_response.create(
            model=s.model, input=prompt, stream=True
        ) as response:
            assert response.headers["x-relay-cache"] == "hit"
            events = list(response.parse())
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == first.output_text
    assert events[-1].type == "response.completed"
    assert upstream_calls(fake, s.model) == 1
