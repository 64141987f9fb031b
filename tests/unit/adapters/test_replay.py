"""A whole response replayed as its shape's stream, and a stream folded back into the whole response
(SPEC §19: a cache hit answers a streaming caller from the stored whole response; a streamed miss stores
what it delivered). Checked on the fake upstream's real bodies and streams, cut at every chunking."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from relay.adapters import Usage
from relay.adapters.replay import StreamAssembler, stream_of
from relay.adapters.translate import READ_RESPONSE
from tests.unit.adapters.helpers import (
    BODIES,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    chunkings,
    parse_sse,
    render,
    render_stream,
)

SHAPES = ["openai", "anthropic", "openai_responses"]
USAGE = Usage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)


def text_of(shape: str, body: bytes) -> str:
    response = READ_RESPONSE[shape](orjson.loads(body))
    return "".join(getattr(part, "text", "") for part in response.content)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_whole_response_replays_as_a_stream_that_folds_back_to_it(shape: str) -> None:
    whole = render(shape, BODIES[shape])
    body = orjson.dumps(whole)
    stream = stream_of(shape, body, model="asked", include_usage=True)
    events = parse_sse(stream)
    assert events, stream
    for chunks in chunkings(stream, rounds=5):
        assembler = StreamAssembler(shape, "asked")
        for chunk in chunks:
            assembler.feed(chunk)
        folded = assembler.finish(USAGE)
        assert folded is not None
        assert text_of(shape, folded) == text_of(shape, body)
        assert orjson.loads(folded)["model"] == "asked"


@pytest.mark.parametrize("shape", SHAPES)
def test_an_upstream_stream_folds_into_the_whole_response_with_the_given_usage(shape: str) -> None:
    stream = render_stream(shape, BODIES[shape])
    assembler = StreamAssembler(shape, "asked")
    assembler.feed(stream)
    folded = assembler.finish(USAGE)
    assert folded is not None
    assert text_of(shape, folded) == text_of(shape, orjson.dumps(render(shape, BODIES[shape])))
    usage: dict[str, Any] = orjson.loads(folded)["usage"]
    assert OUTPUT_TOKENS in usage.values()


@pytest.mark.parametrize("shape", SHAPES)
def test_a_stream_cut_before_its_terminal_event_is_not_whole(shape: str) -> None:
    stream = render_stream(shape, BODIES[shape])
    events = stream.split(b"\n\n")
    assembler = StreamAssembler(shape, "asked")
    assembler.feed(b"\n\n".join(events[: len(events) // 2]) + b"\n\n")
    assert assembler.finish(USAGE) is None


def test_an_error_event_is_never_whole() -> None:
    assembler = StreamAssembler("anthropic", "asked")
    assembler.feed(
        b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}\n\n'
    )
    assert assembler.finish(USAGE) is None


def test_the_canonical_shape_replays_delta_and_done() -> None:
    body = orjson.dumps(
        {
            "id": "r1",
            "model": "m",
            "content": "hello there",
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 2},
        }
    )
    stream = stream_of("canonical", body, model="m")
    assert [name for name, _data in parse_sse(stream)] == ["delta", "done"]
    assembler = StreamAssembler("canonical", "m")
    for byte in range(len(stream)):
        assembler.feed(stream[byte : byte + 1])
    folded = assembler.finish(Usage(input_tokens=3, output_tokens=2))
    assert folded is not None
    parsed = orjson.loads(folded)
    assert (parsed["content"], parsed["stop_reason"], parsed["usage"]) == (
        "hello there",
        "end_turn",
        {"input_tokens": 3, "output_tokens": 2},
    )


def test_a_body_that_is_not_an_object_cannot_replay_and_embeddings_never_fold() -> None:
    with pytest.raises(ValueError):
        stream_of("openai", b"[1, 2]", model="m")
    assembler = StreamAssembler("embeddings", "m")
    assembler.feed(b"data: {}\n\n")
    assert assembler.finish(USAGE) is None
