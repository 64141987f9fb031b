"""SPEC §20 on streams in the caller's shape: OpenAI chat and Anthropic events rewritten through the
window — a match split across events is redacted, a block ends the output with the shape's error event
and nothing after it, and a block before any text was released sends nothing (the caller gets a 422)."""

from __future__ import annotations

import re

import orjson

from relay.domain.guardrails import Guardrail
from relay.request.guardrails.sse import GuardedEvents
from relay.request.guardrails.window import StreamWindow

REDACT = Guardrail("gr_1", "keys", "output", "redact", "", (re.compile(r"sk-[a-z0-9]{8}"),))
BLOCK = Guardrail("gr_2", "words", "output", "block", "not allowed", (re.compile(r"forbidden"),))


def chat_events(pieces: list[str]) -> list[bytes]:
    def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
        body = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": p}) for p in pieces),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]


def anthropic_events(pieces: list[str]) -> list[bytes]:
    def event(name: str, body: dict[str, object]) -> bytes:
        return b"event: " + name.encode() + b"\ndata: " + orjson.dumps({"type": name, **body}) + b"\n\n"

    return [
        event("message_start", {"message": {"id": "m1"}}),
        event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        *(
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
            for p in pieces
        ),
        event("content_block_stop", {"index": 0}),
        event("message_stop", {}),
    ]


def text_of(shape: str, stream: bytes) -> str:
    out = []
    for raw in stream.split(b"\n\n"):
        data = next((line[5:].strip() for line in raw.split(b"\n") if line.startswith(b"data:")), None)
        if not data or data == b"[DONE]":
            continue
        event = orjson.loads(data)
        if shape == "openai" and event.get("choices"):
            out.append(event["choices"][0]["delta"].get("content") or "")
        elif event.get("type") == "content_block_delta":
            out.append(event["delta"]["text"])
    return "".join(out)


def run(shape: str, events: list[bytes], guard: GuardedEvents, split: int = 7) -> bytes:
    wire = b"".join(events)
    sent = b"".join(guard.feed(wire[i : i + split]) for i in range(0, len(wire), split))
    return sent + guard.finish()


def test_a_key_split_across_events_is_redacted_in_both_shapes() -> None:
    pieces = ["here is sk-ab", "cdef12 and ", "more text " * 5]
    for shape, events in (("openai", chat_events(pieces)), ("anthropic", anthropic_events(pieces))):
        sent = run(shape, events, GuardedEvents(shape, lambda: StreamWindow([REDACT], 16)))
        assert b"sk-ab" not in sent and b"cdef12" not in sent
        assert text_of(shape, sent) == "".join(pieces).replace("sk-abcdef12", "[REDACTED]")
        last = b"data: [DONE]\n\n" if shape == "openai" else b"event: message_stop"
        assert last in sent.rstrip().split(b"\n\n")[-1] + b"\n\n"


def test_a_block_ends_the_output_with_the_error_event_and_nothing_after() -> None:
    pieces = ["a long harmless opening " * 3, "then forb", "idden words", "and the rest"]
    for shape, events in (("openai", chat_events(pieces)), ("anthropic", anthropic_events(pieces))):
        guard = GuardedEvents(shape, lambda: StreamWindow([BLOCK], 16))
        sent = run(shape, events, guard)
        assert guard.blocked is not None and guard.blocked.status == 422
        assert b"forb" not in sent and b"the rest" not in sent
        last = orjson.loads(sent.rstrip().split(b"\n\n")[-1].split(b"data: ", 1)[1])
        assert last["error"]["stage"] == "output"
        assert last["error"]["message"] == "guardrail_blocked: words: not allowed"


def test_a_block_before_any_text_was_released_sends_nothing() -> None:
    for shape, events in (
        ("openai", chat_events(["forbidden"])),
        ("anthropic", anthropic_events(["forbidden"])),
    ):
        guard = GuardedEvents(shape, lambda: StreamWindow([BLOCK], 256))
        assert run(shape, events, guard) == b""
        assert guard.blocked is not None
