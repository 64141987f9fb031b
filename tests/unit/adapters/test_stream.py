from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from relay.adapters import StreamTap, Usage, build_upstream_request

from .helpers import (
    BODIES,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    byte_chunks,
    chunkings,
    parse_sse,
    render_stream,
    to_crlf,
)

pytestmark = pytest.mark.usefixtures("deterministic")

EXPECTED = Usage(INPUT_TOKENS, OUTPUT_TOKENS, 0)  # Anthropic: no reasoning count reported
# The fake's OpenAI shapes report ``reasoning_tokens: 0``: a count, unlike Anthropic's none.
EXPECTED_OPENAI = Usage(INPUT_TOKENS, OUTPUT_TOKENS, 0, 0)


def tap_all(shape: str, chunks: list[bytes], strip: bool = False) -> tuple[bytes, Usage, list[bytes]]:
    tap = StreamTap(shape, strip_usage_chunk=strip)
    outputs = [tap.feed(c) for c in chunks]
    tail = tap.finish()
    return b"".join(outputs) + tail, tap.usage, outputs


def chat_stream(include_usage: bool) -> bytes:
    body = {**BODIES["openai"], "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    return render_stream("openai", body)


# --- pass-through taps: bytes untouched, usage read -------------------------------------------


@pytest.mark.parametrize("shape", ["openai_responses", "anthropic"])
@pytest.mark.parametrize("crlf", [False, True])
def test_usage_of_each_shape_whatever_the_chunking(shape: str, crlf: bool) -> None:
    stream = render_stream(shape, {**BODIES[shape], "stream": True})
    stream = to_crlf(stream) if crlf else stream
    for chunks in chunkings(stream):
        out, usage, outputs = tap_all(shape, chunks)
        assert out == stream
        assert all(o is c for o, c in zip(outputs, chunks, strict=True))  # zero copy
        assert usage == (EXPECTED if shape == "anthropic" else EXPECTED_OPENAI)


@pytest.mark.parametrize("crlf", [False, True])
def test_chat_usage_when_the_caller_asked_for_it(crlf: bool) -> None:
    stream = chat_stream(include_usage=True)
    stream = to_crlf(stream) if crlf else stream
    for chunks in chunkings(stream):
        out, usage, outputs = tap_all("openai", chunks)
        assert out == stream
        assert all(o is c for o, c in zip(outputs, chunks, strict=True))
        assert usage == EXPECTED_OPENAI


def test_responses_incomplete_stream_has_usage() -> None:
    body = {**BODIES["openai_responses"], "stream": True, "max_output_tokens": 3}
    stream = render_stream("openai_responses", body)
    assert b"response.incomplete" in stream
    for chunks in chunkings(stream, rounds=5):
        assert tap_all("openai_responses", chunks)[1] == Usage(INPUT_TOKENS, 3, 0, 0)


def test_anthropic_stream_with_cache_and_cumulative_delta() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "usage": {
                "input_tokens": 10,
                "cache_creation_input_tokens": 5,
                "cache_read_input_tokens": 100,
                "output_tokens": 1,
            },
        },
    }
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 42}}
    stream = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"  # type: ignore[attr-defined]
        for e in (start, {"type": "ping"}, delta, {"type": "message_stop"})
    )
    for chunks in chunkings(stream, rounds=5):
        assert tap_all("anthropic", chunks)[1] == Usage(115, 42, 100)


def test_stream_without_usage_is_zero_and_untouched() -> None:
    stream = chat_stream(include_usage=False)
    out, usage, _ = tap_all("openai", [stream])
    assert (out, usage) == (stream, Usage())


def test_garbage_is_forwarded_and_not_metered() -> None:
    garbage = b'data: {"usage": {oops\n\ndata: [DONE]\n\n: comment\n\nrandom bytes \xff without end'
    for shape in ("openai", "openai_responses", "anthropic"):
        out, usage, _ = tap_all(shape, byte_chunks(garbage))
        assert (out, usage) == (garbage, Usage())


def test_usage_in_a_final_event_without_blank_line() -> None:
    stream = b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}'
    assert tap_all("openai", [stream])[1] == Usage(4, 2, 0)
    out, usage, _ = tap_all("openai", [stream], strip=True)
    assert (out, usage) == (b"", Usage(4, 2, 0))


def test_strip_is_only_for_chat() -> None:
    with pytest.raises(ValueError):
        StreamTap("anthropic", strip_usage_chunk=True)
    with pytest.raises(ValueError):
        StreamTap("embeddings")


# --- include_usage injected by Relay, hidden from the caller ---------------------------------


def test_caller_sees_the_stream_it_asked_for_in_every_chunking() -> None:
    request = build_upstream_request(
        "openai",
        {**BODIES["openai"], "stream": True},
        upstream_model="up-model",
        api_key="k",
        caller_headers={},
        stream=True,
    )
    assert request.strip_usage_chunk
    upstream = render_stream("openai", orjson.loads(request.body))  # what the upstream answers Relay
    wanted = chat_stream(include_usage=False)  # what the upstream would answer the caller directly
    assert upstream != wanted and b'"usage":{' in upstream
    for chunks in chunkings(upstream, rounds=60):
        out, usage, _ = tap_all("openai", chunks, strip=True)
        assert out == wanted
        assert usage == EXPECTED_OPENAI


def test_strip_with_crlf_and_splits_inside_every_terminator() -> None:
    upstream = to_crlf(chat_stream(include_usage=True))
    wanted = to_crlf(chat_stream(include_usage=False))
    terminators = [i for i in range(len(upstream)) if upstream.startswith(b"\r\n\r\n", i)]
    for at in terminators:
        for offset in range(1, 4):  # cut inside "\r\n\r\n"
            cut = at + offset
            out, usage, _ = tap_all("openai", [upstream[:cut], upstream[cut:]], strip=True)
            assert out == wanted
            assert usage == EXPECTED_OPENAI
    rng = random.Random(1234)
    for _ in range(40):
        chunks = [upstream[i : i + n] for n in [rng.randint(1, 9)] for i in range(0, len(upstream), n)]
        assert tap_all("openai", chunks, strip=True)[0] == wanted


def test_strip_output_is_whole_events_and_passes_unchanged_chunks_through() -> None:
    upstream = chat_stream(include_usage=True)
    events = [e + b"\n\n" for e in upstream.split(b"\n\n") if e]
    tap = StreamTap("openai", strip_usage_chunk=True)
    outputs = [tap.feed(e) for e in events]
    assert tap.finish() == b""
    assert outputs[-2] == b""  # the usage-only chunk
    assert outputs[-1] is events[-1]  # "data: [DONE]" untouched, same object
    for out in outputs[:-2]:
        assert out.endswith(b"\n\n") and b"usage" not in out


def real_openai_chunk(
    delta: Any,
    finish: str | None,
    usage: object = None,
    choices: bool = True,
    spaced: bool = False,
) -> bytes:
    """Chunks in the order the real API writes them: usage last."""
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o-mini",
        "service_tier": "default",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if choices
        else [],
        "usage": usage,
    }
    encoded = orjson.dumps(chunk) if not spaced else __import__("json").dumps(chunk).encode()
    return b"data: " + encoded + b"\n\n"


@pytest.mark.parametrize("spaced", [False, True])
def test_strip_real_api_layout(spaced: bool) -> None:
    usage = {
        "prompt_tokens": 19,
        "completion_tokens": 10,
        "total_tokens": 29,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    }
    deltas = [({"role": "assistant", "content": ""}, None), ({"content": "Hi"}, None), ({}, "stop")]
    upstream = b"".join(real_openai_chunk(d, f, spaced=spaced) for d, f in deltas)
    upstream += real_openai_chunk({}, None, usage=usage, choices=False, spaced=spaced) + b"data: [DONE]\n\n"
    wanted = [("data", orjson.loads(real_openai_chunk(d, f)[6:])) for d, f in deltas]
    for _name, chunk in wanted:
        del chunk["usage"]
    for chunks in chunkings(upstream, rounds=10):
        out, got, _ = tap_all("openai", chunks, strip=True)
        events = parse_sse(out)
        assert [e for _, e in events[:-1]] == [c for _, c in wanted]
        assert events[-1] == (None, "[DONE]")
        assert got == Usage(19, 10, 0)


def test_strip_keeps_a_content_chunk_that_carries_usage() -> None:
    # Some OpenAI-compatible servers attach usage to the last content chunk instead of an extra one.
    usage = {"prompt_tokens": 3, "completion_tokens": 1}
    upstream = real_openai_chunk({"content": "x"}, "stop", usage=usage) + b"data: [DONE]\n\n"
    out, got, _ = tap_all("openai", [upstream], strip=True)
    events = parse_sse(out)
    assert events[0][1]["choices"][0]["delta"] == {"content": "x"}
    assert "usage" not in events[0][1]
    assert got == Usage(3, 1, 0)


def test_strip_leaves_content_mentioning_usage_alone() -> None:
    text = 'the "usage":null field and "usage": {"a": 1}'
    upstream = real_openai_chunk({"content": text}, None) + b"data: [DONE]\n\n"
    out, _, _ = tap_all("openai", byte_chunks(upstream), strip=True)
    assert parse_sse(out)[0][1]["choices"][0]["delta"]["content"] == text


@pytest.mark.parametrize("strip", [False, True])
def test_chunks_of_several_whole_events(strip: bool) -> None:
    upstream = chat_stream(include_usage=True)
    wanted = chat_stream(include_usage=False) if strip else upstream
    events = [e + b"\n\n" for e in upstream.split(b"\n\n") if e]
    for size in range(1, len(events) + 1):
        chunks = [b"".join(events[i : i + size]) for i in range(0, len(events), size)]
        out, usage, outputs = tap_all("openai", chunks, strip=strip)
        assert out == wanted
        assert usage == EXPECTED_OPENAI
        if not strip:
            assert all(o is c for o, c in zip(outputs, chunks, strict=True))


@pytest.mark.parametrize("strip", [False, True])
@pytest.mark.parametrize("spaced", [False, True])
def test_a_traced_chat_stream_names_its_finish_reasons_whatever_the_chunking(
    strip: bool, spaced: bool
) -> None:
    # Two choices (n=2) finish apart; content that spells a finish reason inside a string is not one.
    deltas = [
        ({"role": "assistant", "content": 'say "finish_reason":"evil"'}, None),
        ({}, "length"),
        ({}, "stop"),
    ]
    upstream = b"".join(real_openai_chunk(d, f, spaced=spaced) for d, f in deltas)
    upstream += real_openai_chunk({}, None, usage={"prompt_tokens": 2}, choices=False, spaced=spaced)
    upstream += b"data: [DONE]\n\n"
    for chunks in chunkings(upstream, rounds=10):
        tap = StreamTap("openai", strip_usage_chunk=strip, traced=True)
        b"".join([tap.feed(c) for c in chunks]) + tap.finish()
        attributes: dict[str, Any] = {}
        tap.answer_attributes(attributes)
        assert attributes["gen_ai.response.finish_reasons"] == ["length", "stop"]
        assert attributes["gen_ai.response.model"] == "gpt-4o-mini"
    untraced = StreamTap("openai", strip_usage_chunk=strip)
    untraced.feed(upstream)
    untraced.finish()
    attributes = {}
    untraced.answer_attributes(attributes)
    assert "gen_ai.response.finish_reasons" not in attributes  # untraced streams never scan for them
