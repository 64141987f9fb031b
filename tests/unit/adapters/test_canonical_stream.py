from __future__ import annotations

import orjson
import pytest

from relay.adapters import CanonicalStream, Usage, canonical_to
from relay.fake_upstream import complete

from .helpers import chunkings, parse_sse, render_stream, run, to_crlf

pytestmark = pytest.mark.usefixtures("deterministic")

CANONICAL = {
    "model": "m",
    "system": "be brief",
    "messages": [{"role": "user", "content": "the quick brown fox"}],
    "stream": True,
}
API = {"openai": "chat", "anthropic": "messages", "openai_responses": "responses"}
ADAPTERS = list(API)


def translate(adapter: str, chunks: list[bytes]) -> tuple[bytes, CanonicalStream]:
    stream = CanonicalStream(adapter)
    return run(stream.feed, stream.finish, chunks), stream


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(("max_tokens", "stop"), [(None, "end_turn"), (3, "max_tokens")])
@pytest.mark.parametrize("crlf", [False, True])
def test_upstream_stream_to_canonical(adapter: str, max_tokens: int | None, stop: str, crlf: bool) -> None:
    canonical = {**CANONICAL, "max_tokens": max_tokens} if max_tokens else CANONICAL
    body = canonical_to(adapter, canonical)
    expected = complete(API[adapter], body)  # type: ignore[arg-type]
    upstream = render_stream(adapter, body)
    upstream = to_crlf(upstream) if crlf else upstream
    for chunks in chunkings(upstream, rounds=8):
        out, stream = translate(adapter, chunks)
        events = parse_sse(out)
        names = [name for name, _ in events]
        assert names == ["delta"] * (len(events) - 1) + ["done"]
        assert "".join(data["text"] for _, data in events[:-1]) == expected.text
        usage = {"input_tokens": expected.input_tokens, "output_tokens": expected.output_tokens}
        assert events[-1][1] == {"stop_reason": stop, "usage": usage}
        # an OpenAI upstream reports a reasoning count (the fake's 0), Anthropic none
        reasoning = None if adapter == "anthropic" else expected.reasoning_tokens
        assert stream.usage == Usage(expected.input_tokens, expected.output_tokens, 0, reasoning)
        assert stream.done


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_truncated_upstream_still_ends_with_one_done(adapter: str) -> None:
    upstream = render_stream(adapter, canonical_to(adapter, CANONICAL))
    for cut in range(0, len(upstream), 7):
        out, _ = translate(adapter, [upstream[:cut]])
        events = parse_sse(out)
        assert [name for name, _ in events].count("done") == 1
        assert events[-1][0] == "done"


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_nothing_after_done(adapter: str) -> None:
    upstream = render_stream(adapter, canonical_to(adapter, CANONICAL))
    stream = CanonicalStream(adapter)
    out = stream.feed(upstream)
    assert stream.done
    assert stream.feed(upstream) == b""
    assert stream.finish() == b""
    assert parse_sse(out)[-1][0] == "done"


def test_empty_upstream_gives_error_done() -> None:
    stream = CanonicalStream("anthropic")
    assert parse_sse(stream.finish()) == [
        ("done", {"stop_reason": "error", "usage": {"input_tokens": 0, "output_tokens": 0}})
    ]


def test_anthropic_error_event() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 4, "output_tokens": 1}}}
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream = b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in (start, error)
    )
    out, _ = translate("anthropic", [upstream])
    assert parse_sse(out) == [
        ("error", {"type": "overloaded_error", "message": "Overloaded"}),
        ("done", {"stop_reason": "error", "usage": {"input_tokens": 4, "output_tokens": 1}}),
    ]


def test_chat_error_chunk_and_missing_done() -> None:
    upstream = (
        b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}\n\n'
        b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n'
    )
    out, _ = translate("openai", [upstream])
    assert parse_sse(out) == [
        ("delta", {"text": "Hi"}),
        ("error", {"type": "server_error", "message": "boom"}),
        ("done", {"stop_reason": "error", "usage": {"input_tokens": 0, "output_tokens": 0}}),
    ]


def test_responses_failed_and_error_events() -> None:
    failed = {
        "type": "response.failed",
        "response": {"status": "failed", "error": {"code": "server_error", "message": "bad"}, "usage": None},
    }
    out, _ = translate(
        "openai_responses", [b"event: response.failed\ndata: " + orjson.dumps(failed) + b"\n\n"]
    )
    assert [name for name, _ in parse_sse(out)] == ["error", "done"]
    assert parse_sse(out)[-1][1]["stop_reason"] == "error"
    error = {"type": "error", "code": "rate_limit_exceeded", "message": "slow", "sequence_number": 1}
    out, _ = translate("openai_responses", [b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"])
    assert parse_sse(out)[0] == ("error", {"type": "rate_limit_exceeded", "message": "slow"})


def test_chat_stream_finished_without_done_sentinel_keeps_its_stop_reason() -> None:
    upstream = (
        b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}]}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}\n\n'
    )
    out, _ = translate("openai", [upstream])
    assert parse_sse(out)[-1] == (
        "done",
        {"stop_reason": "end_turn", "usage": {"input_tokens": 2, "output_tokens": 1}},
    )


def test_unknown_adapter() -> None:
    with pytest.raises(ValueError):
        CanonicalStream("embeddings")
