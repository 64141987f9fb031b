"""Property tests of SPEC §7.3's translation (hypothesis): a request translated A → B → A keeps its
meaning, and a stream translated event by event — cut into chunks anywhere — gives the same final
message as the whole response translated at once, for every pair of provider shapes."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.adapters import ir
from relay.adapters.sse import EventSplitter, event_data
from relay.adapters.translate import (
    DECODERS,
    ENCODERS,
    READ_REQUEST,
    READ_RESPONSE,
    WRITE_RESPONSE,
    TranslatingStream,
    translate_request,
    translate_response,
    write_request,
)

SHAPES = ["openai", "anthropic", "openai_responses"]
PAIRS = [(a, b) for a in SHAPES for b in SHAPES if a != b]
# Each example runs all six pairs; the sizes keep the module near 15 s on a loaded 2-core machine.
REQUEST_SETTINGS = settings(max_examples=30, deadline=None)
STREAM_SETTINGS = settings(max_examples=40, deadline=None)

words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
call_ids = st.from_regex(r"call_[A-Za-z0-9]{4,12}", fullmatch=True)
json_objects = st.dictionaries(names, st.one_of(st.integers(-5, 5), words, st.booleans()), max_size=3)
arguments = json_objects.map(lambda d: orjson.dumps(d).decode())
images = st.one_of(
    st.builds(ir.Image, url=names.map(lambda n: "https://img.test/" + n)),
    st.builds(
        ir.Image,
        media_type=st.sampled_from(["image/png", "image/jpeg"]),
        data=st.from_regex(r"[A-Za-z0-9+/]{4,16}=?", fullmatch=True),
    ),
)


@st.composite
def conversations(draw: Any) -> list[ir.Message]:
    turns: list[ir.Message] = []
    pending: list[str] = []  # tool calls awaiting a result
    for _ in range(draw(st.integers(1, 4))):
        results: list[ir.Part] = [ir.ToolResult(cid, [ir.Text(draw(words))]) for cid in pending]
        extra: list[ir.Part] = draw(
            st.lists(st.one_of(st.builds(ir.Text, words), images), min_size=0 if results else 1, max_size=3)
        )
        turns.append(ir.Message("user", results + extra))
        text: list[ir.Part] = [ir.Text(draw(words))] if draw(st.booleans()) else []
        calls = [
            ir.ToolCall(draw(call_ids), draw(names), draw(arguments)) for _ in range(draw(st.integers(0, 2)))
        ]
        ids = [c.id for c in calls]
        if len(set(ids)) != len(ids) or not (text or calls):
            break
        pending = ids
        turns.append(ir.Message("assistant", text + calls))
    if turns[-1].role == "assistant":
        pending_ids = [p.id for p in turns[-1].parts if isinstance(p, ir.ToolCall)]
        turns.append(
            ir.Message("user", [ir.ToolResult(cid, [ir.Text("ok")]) for cid in pending_ids] + [ir.Text("go")])
        )
    return turns


@st.composite
def requests(draw: Any, with_stop: bool) -> ir.Request:
    tools = draw(
        st.one_of(
            st.none(),
            st.lists(
                st.builds(
                    ir.Tool,
                    names,
                    st.one_of(st.none(), words),
                    st.just({"type": "object", "properties": {}}),
                    st.sampled_from([None, False]),
                ),
                min_size=1,
                max_size=2,
                unique_by=lambda t: t.name,
            ),
        )
    )
    choice = draw(st.sampled_from([None, "auto", "none", "required"] + (["tool"] if tools else [])))
    return ir.Request(
        model="m",
        messages=draw(conversations()),
        system=draw(st.lists(words, max_size=1)),
        tools=tools,
        tool_choice=choice,
        tool_name=tools[0].name if choice == "tool" and tools else None,
        parallel_tool_calls=draw(st.sampled_from([None, False])),
        max_tokens=draw(st.integers(1, 10_000)),
        temperature=draw(st.one_of(st.none(), st.floats(0, 1, allow_nan=False))),
        top_p=draw(st.one_of(st.none(), st.floats(0, 1, allow_nan=False))),
        stop=draw(st.one_of(st.none(), st.lists(words, min_size=1, max_size=2))) if with_stop else None,
        user=draw(st.one_of(st.none(), names)),
        stream=draw(st.booleans()),
    )


def meaning(req: ir.Request) -> ir.Request:
    """What two spellings of one request must agree on: tool inputs as parsed JSON, ``strict: null`` as
    its default (false), no tool choice as its default (``auto``: a tool choice Relay must spell out to
    carry ``parallel_tool_calls: false`` to Anthropic), a caller-side flag (include_usage) ignored."""
    out = dataclasses.replace(req, include_usage=False, tool_choice=req.tool_choice or "auto")
    if not req.tools:  # without tools a tool choice asks for nothing (and is not sent)
        out.tool_choice, out.tool_name, out.parallel_tool_calls = "auto", None, None
    out.messages = [
        ir.Message(
            m.role,
            [
                dataclasses.replace(p, arguments=orjson.loads(p.arguments or "{}"))
                if isinstance(p, ir.ToolCall)
                else p
                for p in m.parts
            ],
        )
        for m in req.messages
    ]
    if req.tools is not None:
        out.tools = [dataclasses.replace(t, strict=bool(t.strict)) for t in req.tools]
    return out


@REQUEST_SETTINGS
@given(st.data())
def test_a_request_translated_there_and_back_keeps_its_meaning(data: st.DataObject) -> None:
    for a, b in PAIRS:
        req = data.draw(requests(with_stop="openai_responses" not in (a, b)), label=f"{a}->{b}")
        body_a = write_request(a, req, 4096)
        start = READ_REQUEST[a](body_a, b)
        body_b, _ = translate_request(a, b, body_a, default_max_tokens=4096)
        back, _ = translate_request(b, a, body_b, default_max_tokens=4096)
        assert meaning(READ_REQUEST[a](back, b)) == meaning(start), (a, b, body_a, body_b, back)


@st.composite
def responses(draw: Any) -> ir.Response:
    content: list[ir.Text | ir.ToolCall] = []
    if draw(st.booleans()):
        content.append(ir.Text(draw(words)))
    ids = draw(st.lists(call_ids, max_size=2, unique=True))
    content += [ir.ToolCall(cid, draw(names), draw(arguments)) for cid in ids]
    cached = draw(st.integers(0, 50))
    written = draw(st.integers(0, 50))
    usage = ir.Usage(cached + written + draw(st.integers(0, 500)), draw(st.integers(0, 500)), cached, written)
    stop = ir.TOOL_USE if ids else draw(st.sampled_from([ir.END_TURN, ir.MAX_TOKENS]))
    return ir.Response(
        draw(st.from_regex(r"[a-z]{3}_[A-Za-z0-9]{6}", fullmatch=True)),
        "up",
        content,
        stop,
        None,
        usage,
        1_700_000_000,
    )


def final_message(resp: ir.Response) -> tuple[Any, ...]:
    text = "".join(p.text for p in resp.content if isinstance(p, ir.Text))
    calls = [(p.id, p.name, orjson.loads(p.arguments)) for p in resp.content if isinstance(p, ir.ToolCall)]
    return resp.id, text, calls, resp.stop, resp.usage


def decode(shape: str, data: bytes) -> ir.Response:
    """A client of ``shape`` folding the stream it received back into one message."""
    decoder = DECODERS[shape]()
    collector = ir.Collector("m")
    buf, spans = EventSplitter().split(data)
    for start, end, _ in spans:
        raw = event_data(buf, start, end)
        assert raw is not None
        events = decoder.done() if raw == b"[DONE]" else decoder.take(orjson.loads(raw))
        for event in events:
            collector.take(event)
    assert collector.ended and collector.error is None
    return collector.response


@STREAM_SETTINGS
@given(st.data())
def test_a_stream_translated_event_by_event_gives_the_whole_responses_message(data: st.DataObject) -> None:
    for a, b in PAIRS:
        resp = data.draw(responses(), label=f"{a}->{b}")
        upstream_whole = orjson.dumps(WRITE_RESPONSE[a](resp, "up"))
        whole = READ_RESPONSE[b](orjson.loads(translate_response(a, b, upstream_whole, model="m")))
        encoder = ENCODERS[a]("up", True)
        upstream_stream = b"".join(encoder.take(e) for e in ir.response_events(resp))
        cuts = sorted(data.draw(st.lists(st.integers(0, len(upstream_stream)), max_size=6), label="cuts"))
        pieces = [
            upstream_stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(upstream_stream)], strict=True)
        ]
        stream = TranslatingStream(a, b, model="m", include_usage=True)
        caller_stream = b"".join(stream.feed(p) for p in pieces) + stream.finish()
        assert final_message(decode(b, caller_stream)) == final_message(whole), (a, b)
