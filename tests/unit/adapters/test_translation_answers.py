"""Response and stream mapping of SPEC §7.3 in every direction: what the fake upstream answers (each
API's exact JSON and SSE) translated to each other shape, checked field by field and validated against
the official SDKs' own types, plus the fake's answers themselves against those types."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from anthropic.types import ErrorResponse, Message, RawMessageStreamEvent
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from relay.adapters import TranslatingStream, translate_error, translate_response

from .helpers import RENDER, chunkings, parse_sse, run

SHAPES = ["openai", "anthropic", "openai_responses"]
PAIRS = [(a, b) for a in SHAPES for b in SHAPES if a != b]
TOOLS = {
    "openai": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
    "anthropic": [{"name": "lookup", "input_schema": {"type": "object"}}],
    "openai_responses": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
}
API = {"openai": "messages", "anthropic": "messages", "openai_responses": "input"}
STREAM_EVENTS: dict[str, TypeAdapter[Any]] = {
    "anthropic": TypeAdapter(RawMessageStreamEvent),
    "openai_responses": TypeAdapter(ResponseStreamEvent),
}


def upstream_body(
    adapter: str, text: str, *, tools: bool = False, limit: int | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "up"}
    if adapter == "openai_responses":
        body["input"] = text
        if limit is not None:
            body["max_output_tokens"] = limit
    else:
        body["messages"] = [{"role": "user", "content": text}]
        if limit is not None:
            body["max_tokens"] = limit
    if tools:
        body["tools"] = TOOLS[adapter]
    return body


def validate_whole(shape: str, body: dict[str, Any]) -> Any:
    model = {"openai": ChatCompletion, "anthropic": Message, "openai_responses": Response}[shape]
    return model.model_validate(body)


def validate_events(shape: str, events: list[tuple[str | None, Any]]) -> None:
    for name, payload in events:
        if shape == "openai":
            if payload != "[DONE]" and "error" not in payload:
                ChatCompletionChunk.model_validate(payload)
        else:
            assert name == payload["type"]
            if name == "error" and shape == "anthropic":
                ErrorResponse.model_validate(payload)
            elif name != "ping":
                STREAM_EVENTS[shape].validate_python(payload)


# --- the fake upstream speaks each real API's exact format ---------------------------------------------


@pytest.mark.parametrize("adapter", SHAPES)
@pytest.mark.parametrize("case", ["text", "tool", "cached"])
def test_fake_answers_validate_against_the_sdk_types(adapter: str, case: str) -> None:
    body = upstream_body(
        adapter, "call lookup now fake:cached=2" if case != "text" else "hi", tools=case == "tool"
    )
    validate_whole(adapter, RENDER[adapter].render(body, "up"))
    validate_events(
        adapter, parse_sse(b"".join(RENDER[adapter].render_stream({**body, "stream": True}, "up")))
    )


# --- whole responses ---------------------------------------------------------------------------------


def translated(adapter: str, inbound: str, body: dict[str, Any]) -> dict[str, Any]:
    raw = orjson.dumps(RENDER[adapter].render(body, "up"))
    out: dict[str, Any] = orjson.loads(translate_response(adapter, inbound, raw, model="callers-name"))
    validate_whole(inbound, out)
    return out


def read_back(inbound: str, out: dict[str, Any]) -> dict[str, Any]:
    """The caller-visible meaning of a translated answer in one vocabulary."""
    if inbound == "openai":
        m = out["choices"][0]["message"]
        calls = [
            (c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
            for c in m.get("tool_calls", [])
        ]
        u = out["usage"]
        usage = (u["prompt_tokens"], u["completion_tokens"], u["prompt_tokens_details"]["cached_tokens"])
        return {
            "text": m["content"] or "",
            "calls": calls,
            "stop": out["choices"][0]["finish_reason"],
            "usage": usage,
        }
    if inbound == "anthropic":
        text = "".join(b["text"] for b in out["content"] if b["type"] == "text")
        calls = [(b["id"], b["name"], b["input"]) for b in out["content"] if b["type"] == "tool_use"]
        u = out["usage"]
        total = u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        return {
            "text": text,
            "calls": calls,
            "stop": out["stop_reason"],
            "usage": (total, u["output_tokens"], u["cache_read_input_tokens"]),
        }
    text = "".join(p["text"] for o in out["output"] if o["type"] == "message" for p in o["content"])
    calls = [
        (o["call_id"], o["name"], orjson.loads(o["arguments"]))
        for o in out["output"]
        if o["type"] == "function_call"
    ]
    u = out["usage"]
    stop = out["status"] if out["status"] == "completed" else out["incomplete_details"]["reason"]
    return {
        "text": text,
        "calls": calls,
        "stop": stop,
        "usage": (u["input_tokens"], u["output_tokens"], u["input_tokens_details"]["cached_tokens"]),
    }


END = {"openai": "stop", "anthropic": "end_turn", "openai_responses": "completed"}
TOOL_STOP = {"openai": "tool_calls", "anthropic": "tool_use", "openai_responses": "completed"}
LENGTH = {"openai": "length", "anthropic": "max_tokens", "openai_responses": "max_output_tokens"}


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
def test_text_response_id_model_and_usage(adapter: str, inbound: str) -> None:
    upstream = RENDER[adapter].render(upstream_body(adapter, "hello world fake:cached=2"), "up")
    out = translated(adapter, inbound, upstream_body(adapter, "hello world fake:cached=2"))
    seen = read_back(inbound, out)
    assert seen["text"] == "Echo: hello world fake:cached=2" and seen["stop"] == END[inbound]
    assert seen["usage"] == (3, 4, 2)  # cached input = cached_tokens ↔ cache_read_input_tokens
    assert out["model"] == "callers-name"
    assert out["id"][:4] == upstream["id"][:4]  # the upstream's id scheme (ids are random per render)


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
def test_tool_call_response_keeps_the_id(adapter: str, inbound: str, deterministic: None) -> None:
    body = upstream_body(adapter, "please lookup x", tools=True)
    upstream = RENDER[adapter].render(body, "up")
    out = translated(adapter, inbound, body)
    seen = read_back(inbound, out)
    assert seen["stop"] == TOOL_STOP[inbound] and seen["text"] == ""
    [(call_id, name, args)] = seen["calls"]
    assert (name, args) == ("lookup", {"text": "please lookup x"})
    upstream_ids = orjson.dumps(upstream).decode()
    assert call_id and call_id in upstream_ids


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
def test_length_stop(adapter: str, inbound: str) -> None:
    seen = read_back(inbound, translated(adapter, inbound, upstream_body(adapter, "one two three", limit=2)))
    assert seen["stop"] == LENGTH[inbound] and seen["text"] == "Echo: one"


def test_stop_sequence_reaches_an_anthropic_caller_as_end_turn_from_chat() -> None:
    """Chat's ``stop`` cannot tell a stop sequence from a natural end: ``end_turn``."""
    body = {"model": "up", "messages": [{"role": "user", "content": "a b c"}], "stop": ["b"]}
    assert read_back("anthropic", translated("openai", "anthropic", body))["stop"] == "end_turn"
    body = {
        "model": "up",
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "a b c"}],
        "stop_sequences": ["b"],
    }
    assert read_back("openai", translated("anthropic", "openai", body))["stop"] == "stop"


def test_a_response_that_is_not_json_is_refused() -> None:
    with pytest.raises(ValueError):
        translate_response("openai", "anthropic", b"<html>", model="m")
    with pytest.raises(ValueError):
        translate_response("openai", "anthropic", b"[1]", model="m")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"error": {"message": "bad key", "type": "invalid_request_error", "code": null}}', "bad key"),
        (b'{"type": "error", "error": {"type": "not_found_error", "message": "no model"}}', "no model"),
        (b"<html>oops</html>", "upstream returned 404"),
    ],
)
def test_upstream_errors_in_the_callers_shape(body: bytes, message: str) -> None:
    assert orjson.loads(translate_error("anthropic", 404, body)) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": message},
    }
    assert orjson.loads(translate_error("openai", 404, body)) == {
        "error": {"type": "not_found_error", "code": "upstream_error", "message": message}
    }


# --- streams -----------------------------------------------------------------------------------------


def translate_stream(
    adapter: str,
    inbound: str,
    body: dict[str, Any],
    chunks: list[bytes] | None = None,
    *,
    include_usage: bool = True,
) -> list[tuple[str | None, Any]]:
    if adapter == "openai":  # what translate_request always asks a chat upstream for
        body = {**body, "stream_options": {"include_usage": True}}
    raw = b"".join(RENDER[adapter].render_stream({**body, "stream": True}, "up"))
    stream = TranslatingStream(adapter, inbound, model="callers-name", include_usage=include_usage)
    out = run(stream.feed, stream.finish, chunks if chunks is not None else [raw])
    events = parse_sse(out)
    validate_events(inbound, events)
    return events


def fold(inbound: str, events: list[tuple[str | None, Any]]) -> dict[str, Any]:
    """The final message a client builds from a stream, in ``read_back``'s vocabulary."""
    if inbound == "openai":
        text, calls, stop, usage = "", {}, None, None
        for _, e in events:
            if e == "[DONE]":
                continue
            assert e["model"] == "callers-name"
            if e.get("usage"):
                u = e["usage"]
                usage = (
                    u["prompt_tokens"],
                    u["completion_tokens"],
                    u["prompt_tokens_details"]["cached_tokens"],
                )
            for c in e["choices"]:
                text += c["delta"].get("content") or ""
                for tc in c["delta"].get("tool_calls", []):
                    entry = calls.setdefault(tc["index"], [tc.get("id"), tc["function"].get("name"), ""])
                    entry[2] += tc["function"].get("arguments", "")
                stop = c["finish_reason"] or stop
        parsed = [(i, n, orjson.loads(a)) for i, n, a in calls.values()]
        return {"text": text, "calls": parsed, "stop": stop, "usage": usage}
    if inbound == "anthropic":
        blocks: list[dict[str, Any]] = []
        message: dict[str, Any] = {}
        for name, e in events:
            if name == "message_start":
                message = e["message"]
                assert message["model"] == "callers-name"
            elif name == "content_block_start":
                blocks.append({**e["content_block"], "json": ""})
            elif name == "content_block_delta":
                d = e["delta"]
                if d["type"] == "text_delta":
                    blocks[e["index"]]["text"] += d["text"]
                else:
                    blocks[e["index"]]["json"] += d["partial_json"]
            elif name == "message_delta":
                message = {
                    **message,
                    "stop_reason": e["delta"]["stop_reason"],
                    "usage": {**message["usage"], **e["usage"]},
                }
        content = [
            {"type": "tool_use", "id": b["id"], "name": b["name"], "input": orjson.loads(b["json"])}
            if b["type"] == "tool_use"
            else {"type": "text", "text": b["text"]}
            for b in blocks
        ]
        return read_back("anthropic", {**message, "content": content})
    final = [e for name, e in events if name in ("response.completed", "response.incomplete")]
    assert len(final) == 1
    deltas = "".join(e["delta"] for name, e in events if name == "response.output_text.delta")
    seen = read_back("openai_responses", final[0]["response"])
    assert deltas == seen["text"] and final[0]["response"]["model"] == "callers-name"
    return seen


CASES = {
    "text": {"text": "hello world fake:cached=1"},
    "tool": {"text": "go lookup it", "tools": True},
    "length": {"text": "one two three four", "limit": 2},
}


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
@pytest.mark.parametrize("case", list(CASES))
def test_stream_gives_the_same_final_message_as_the_whole_response(
    adapter: str, inbound: str, case: str
) -> None:
    spec = CASES[case]
    body = upstream_body(adapter, spec["text"], tools=spec.get("tools", False), limit=spec.get("limit"))
    whole = read_back(inbound, translated(adapter, inbound, body))
    streamed = fold(inbound, translate_stream(adapter, inbound, body))
    whole["calls"] = [(n, a) for _, n, a in whole["calls"]]  # ids are random per render of the fake
    streamed["calls"] = [(n, a) for _, n, a in streamed["calls"]]
    assert streamed == whole


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
def test_stream_output_does_not_depend_on_chunk_boundaries(
    adapter: str, inbound: str, deterministic: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import relay.adapters.chat_sse as chat_sse
    import relay.adapters.responses_ir as responses_ir

    monkeypatch.setattr(chat_sse.time, "time", lambda: 1.0)
    monkeypatch.setattr(responses_ir.time, "time", lambda: 1.0)
    body = upstream_body(adapter, "go lookup it", tools=True)
    raw = b"".join(RENDER[adapter].render_stream({**body, "stream": True}, "up"))
    outputs = set()
    for chunks in chunkings(raw, rounds=5):
        stream = TranslatingStream(adapter, inbound, model="m", include_usage=True)
        outputs.add(run(stream.feed, stream.finish, chunks))
    assert len(outputs) == 1


def test_chat_caller_gets_the_usage_chunk_only_when_asked() -> None:
    body = upstream_body("anthropic", "hi")
    without = translate_stream("anthropic", "openai", body, include_usage=False)
    assert [e for _, e in without if e != "[DONE]" and "usage" in e] == []
    with_usage = translate_stream("anthropic", "openai", body, include_usage=True)
    usage = [e for _, e in with_usage if e != "[DONE]" and e.get("usage")]
    assert len(usage) == 1 and usage[0]["choices"] == [] and with_usage[-1][1] == "[DONE]"


def test_anthropic_caller_gets_input_tokens_cumulatively_in_message_delta() -> None:
    events = translate_stream("openai", "anthropic", upstream_body("openai", "hello there fake:cached=1"))
    delta = next(e for name, e in events if name == "message_delta")
    assert delta["usage"] == {
        "input_tokens": 2,
        "output_tokens": 4,
        "cache_read_input_tokens": 1,
        "cache_creation_input_tokens": 0,
    }


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
def test_mid_stream_upstream_error_becomes_the_callers_error_event(adapter: str, inbound: str) -> None:
    events = translate_stream(adapter, inbound, upstream_body(adapter, "hello fake:stream_error"))
    name, last = events[-1]
    if inbound == "openai":
        assert set(last) == {"error"} and last["error"]["message"]
    elif inbound == "anthropic":
        assert name == "error" and last["error"]["message"]
    else:
        assert name == "error" and last["message"]
    texts = [e for n, e in events if n in ("content_block_delta", "response.output_text.delta")]
    assert texts or inbound == "openai"


@pytest.mark.parametrize(("adapter", "inbound"), PAIRS)
def test_a_stream_cut_short_ends_with_one_error_event(adapter: str, inbound: str) -> None:
    raw = b"".join(RENDER[adapter].render_stream({**upstream_body(adapter, "a b c"), "stream": True}, "up"))
    stream = TranslatingStream(adapter, inbound, model="m")
    out = stream.feed(raw[: len(raw) // 2]) + stream.finish()
    events = parse_sse(out)
    errors = [
        e for n, e in events if n == "error" or (isinstance(e, dict) and "error" in e and inbound == "openai")
    ]
    assert len(errors) == 1 and events[-1][1] is errors[0]
    assert stream.fail("again") == b""  # the stream has ended: nothing more is written
