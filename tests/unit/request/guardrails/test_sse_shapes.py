"""SPEC §20 on every streamed shape: Responses and canonical (``/v1/generate``) streams through the window
— a match split at every chunk boundary is redacted, the events that repeat the text carry the redacted
one, nothing after a block is sent — chat with ``n`` > 1 windowed per choice, and a stream held whole
(what an output webhook's policy does) rebuilt with the checked text.

The Responses events are the real encoder's (``relay.adapters.responses_sse``), so the ``.done`` events
and the terminal response are the ones a caller gets."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter

from relay.adapters import ir
from relay.adapters.responses_sse import ResponsesEncoder
from relay.domain.guardrails import Guardrail
from relay.request.guardrails.held import HeldEvents
from relay.request.guardrails.sse import GuardedEvents
from relay.request.guardrails.step import Asked, GuardrailStep
from relay.request.guardrails.window import StreamWindow

REDACT = Guardrail("gr_1", "keys", "output", "redact", "", (re.compile(r"sk-[a-z0-9]{8}"),))
BLOCK = Guardrail("gr_2", "words", "output", "block", "not allowed", (re.compile(r"forbidden"),))
SECRET = "sk-abcdef12"
SHAPES = ("openai_responses", "canonical")


def responses_events(pieces: list[str]) -> bytes:
    encoder = ResponsesEncoder("m")
    events: list[ir.Event] = [ir.Start("resp_1", 1), *(ir.TextDelta(p) for p in pieces if p)]
    events += [ir.UsageUpdate(ir.Usage(3, 4)), ir.Stop(ir.END_TURN), ir.End()]
    return b"".join(encoder.take(e) for e in events)


def canonical_events(pieces: list[str]) -> bytes:
    def event(name: str, body: dict[str, Any]) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"

    done = event("done", {"stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 2}})
    return b"".join(event("delta", {"text": p}) for p in pieces if p) + done


WIRES = {"openai_responses": responses_events, "canonical": canonical_events}


def parsed(stream: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    out = []
    for raw in stream.split(b"\n\n"):
        if not raw.strip():
            continue
        lines = raw.split(b"\n")
        name = next((line[6:].strip().decode() for line in lines if line.startswith(b"event:")), None)
        data = next(line[5:].strip() for line in lines if line.startswith(b"data:"))
        out.append((name, orjson.loads(data)))
    return out


def text_of(shape: str, stream: bytes) -> str:
    if shape == "canonical":
        return "".join(e["text"] for name, e in parsed(stream) if name == "delta")
    return "".join(e["delta"] for _, e in parsed(stream) if e["type"] == "response.output_text.delta")


def run(guard: GuardedEvents, wire: bytes, split: int) -> bytes:
    sent = b"".join(guard.feed(wire[i : i + split]) for i in range(0, len(wire), split))
    return sent + guard.finish()


def windowed(shape: str, *guardrails: Guardrail, size: int = 16) -> GuardedEvents:
    return GuardedEvents(shape, lambda: StreamWindow(guardrails, size))


def assert_responses_whole(sent: bytes, text: str) -> None:
    """The events that repeat the text carry the text the caller was sent, and are numbered in order."""
    events = [e for _, e in parsed(sent)]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = {e["type"]: e for e in events}
    assert kinds["response.output_text.done"]["text"] == text
    assert kinds["response.content_part.done"]["part"]["text"] == text
    assert kinds["response.output_item.done"]["item"]["content"][0]["text"] == text
    assert kinds["response.completed"]["response"]["output"][0]["content"][0]["text"] == text


@pytest.mark.parametrize("shape", SHAPES)
def test_a_match_split_at_every_boundary_is_redacted(shape: str) -> None:
    before, after = "the key is ", " and more text " * 3
    for cut in range(1, len(SECRET)):
        pieces = [before + SECRET[:cut], SECRET[cut:] + after]
        for split in (1, 5, 64, 10_000):
            sent = run(windowed(shape, REDACT), WIRES[shape](pieces), split)
            expected = before + "[REDACTED]" + after
            assert text_of(shape, sent) == expected
            assert SECRET[:cut].encode() not in sent or cut < 3  # "sk" alone is not the secret
            assert b"abcdef12" not in sent
            if shape == "openai_responses":
                assert_responses_whole(sent, expected)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SHAPES),
    st.text(alphabet="ab -", max_size=40),
    st.text(alphabet="ab -", max_size=300),
    st.lists(st.integers(0, 400), max_size=8),
    st.integers(1, 200),
    st.integers(16, 64),
)
def test_any_chunking_redacts_and_repeats_the_redacted_text(
    shape: str, before: str, after: str, cuts: list[int], split: int, size: int
) -> None:
    text = before + SECRET + after
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    sent = run(windowed(shape, REDACT, size=size), WIRES[shape](pieces), split)
    expected = before + "[REDACTED]" + after
    assert text_of(shape, sent) == expected and b"abcdef12" not in sent
    if shape == "openai_responses":
        assert_responses_whole(sent, expected)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(SHAPES),
    st.text(alphabet="ab -", max_size=300),
    st.text(alphabet="ab -", max_size=100),
    st.lists(st.integers(0, 500), max_size=8),
    st.integers(1, 200),
)
def test_nothing_after_a_block_is_sent(
    shape: str, before: str, after: str, cuts: list[int], split: int
) -> None:
    text = before + "forbidden" + after
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    guard = windowed(shape, BLOCK)
    sent = run(guard, WIRES[shape](pieces), split)
    assert guard.blocked is not None and guard.blocker is BLOCK
    assert b"forb" not in sent
    if not sent:  # found before the first event: the caller is answered a 422 instead
        return
    name, last = parsed(sent)[-1]
    assert name == "error" and last["code"] == "guardrail_blocked" and last["stage"] == "output"
    assert last["message"] == "guardrail_blocked: words: not allowed"
    assert before.startswith(text_of(shape, sent))
    kinds = [e.get("type") for _, e in parsed(sent)]
    assert "response.completed" not in kinds and "done" not in [n for n, _ in parsed(sent)]


def chat_chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c1", "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


def test_chat_choices_are_windowed_each_on_its_own() -> None:
    """``n`` > 1: the choices' deltas interleave; a match split across choice 0's chunks is redacted,
    choice 1's text is never mixed into it, and each held text comes back under its own index."""
    wire = b"".join(
        [
            chat_chunk(0, {"role": "assistant", "content": ""}),
            chat_chunk(1, {"role": "assistant", "content": ""}),
            chat_chunk(0, {"content": "zero has sk-abc"}),
            chat_chunk(1, {"content": "one says sk-"}),
            chat_chunk(0, {"content": "def12 ok"}),
            chat_chunk(1, {"content": "xyz and " + "more " * 10}),
            chat_chunk(0, {}, "stop"),
            chat_chunk(1, {}, "stop"),
            b"data: [DONE]\n\n",
        ]
    )
    for split in (3, 50, 10_000):
        sent = run(GuardedEvents("openai", lambda: StreamWindow([REDACT], 16)), wire, split)
        texts: dict[int, str] = {0: "", 1: ""}
        finished = []
        for raw in sent.split(b"\n\n"):
            if raw.startswith(b"data: {"):
                for choice in orjson.loads(raw[6:])["choices"]:
                    texts[choice["index"]] += choice["delta"].get("content") or ""
                    if choice["finish_reason"]:
                        finished.append(choice["index"])
        assert texts == {0: "zero has [REDACTED] ok", 1: "one says sk-xyz and " + "more " * 10}
        assert finished == [0, 1] and sent.endswith(b"data: [DONE]\n\n")


def step() -> GuardrailStep:
    registry = CollectorRegistry()
    actions = Counter("a", "a", ["guardrail", "action"], registry=registry)
    failures = Counter("f", "f", ["guardrail"], registry=registry)
    return GuardrailStep(actions, failures)


ASKED = Asked("m", "prj_1", "req_1")


@pytest.mark.parametrize("shape", SHAPES)
def test_a_held_stream_is_sent_whole_rebuilt_or_not_at_all(shape: str) -> None:
    wire = WIRES[shape](["a key sk-abc", "def12 in ", "the answer"])
    held = HeldEvents(shape)
    assert all(held.feed(wire[i : i + 7]) == b"" for i in range(0, len(wire), 7))
    assert (
        asyncio.run(held.settle(step(), [Guardrail("g", "words", "output", "block", "", ())], ASKED)) == wire
    )

    held = HeldEvents(shape)
    held.feed(wire)
    sent = asyncio.run(held.settle(step(), [REDACT], ASKED))
    assert text_of(shape, sent) == "a key [REDACTED] in the answer" and b"abcdef12" not in sent
    assert held.applied == [{"name": "keys", "stage": "output", "action": "redact"}]
    if shape == "openai_responses":
        assert_responses_whole(sent, "a key [REDACTED] in the answer")
        deltas = [e for _, e in parsed(sent) if e["type"] == "response.output_text.delta"]
        assert len(deltas) == 1  # one delta carries the checked text

    held = HeldEvents(shape)
    held.feed(wire.replace(b"answer", b"forbidden"))
    assert asyncio.run(held.settle(step(), [BLOCK], ASKED)) == b""
    assert held.blocked is not None and held.blocked.status == 422
