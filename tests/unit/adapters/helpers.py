"""Adapter test helpers: deterministic fake-upstream bodies and streams, chunking, a strict SSE parser."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from relay.fake_upstream import anthropic as fake_anthropic
from relay.fake_upstream import openai_chat as fake_chat
from relay.fake_upstream import responses as fake_responses
from tests.fixtures.sse import parse_sse as parse_sse  # the stream tests import it from here

RENDER: dict[str, Any] = {
    "openai": fake_chat,
    "openai_responses": fake_responses,
    "anthropic": fake_anthropic,
}

CHAT_BODY = {
    "model": "gpt-x",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "the quick brown fox jumps over it"},
    ],
}
RESPONSES_BODY = {"model": "gpt-x", "instructions": "be brief", "input": "the quick brown fox jumps over it"}
ANTHROPIC_BODY = {
    "model": "claude-x",
    "system": "be brief",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "the quick brown fox jumps over it"}],
}
BODIES: dict[str, dict[str, Any]] = {
    "openai": CHAT_BODY,
    "openai_responses": RESPONSES_BODY,
    "anthropic": ANTHROPIC_BODY,
}
# Expected usage for the bodies above: 2 + 7 input words; "Echo:" + 7 words out.
INPUT_TOKENS = 9
OUTPUT_TOKENS = 8


def render_stream(shape: str, body: dict[str, Any], model: str = "up-model") -> bytes:
    return b"".join(RENDER[shape].render_stream(body, model))


def render(shape: str, body: dict[str, Any], model: str = "up-model") -> dict[str, Any]:
    result: dict[str, Any] = RENDER[shape].render(body, model)
    return result


def to_crlf(stream: bytes) -> bytes:
    return stream.replace(b"\n", b"\r\n")


def random_chunks(data: bytes, rng: random.Random, max_size: int = 40) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        size = rng.randint(1, max_size)
        out.append(data[i : i + size])
        i += size
    return out


def byte_chunks(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def chunkings(data: bytes, seed: int = 7, rounds: int = 25) -> Iterator[list[bytes]]:
    """One piece, byte by byte, then seeded random splits."""
    yield [data]
    yield byte_chunks(data)
    rng = random.Random(seed)
    for _ in range(rounds):
        yield random_chunks(data, rng, max_size=rng.choice((3, 17, 64, 300)))


def run(feed: Callable[[bytes], bytes], finish: Callable[[], bytes], chunks: Iterable[bytes]) -> bytes:
    return b"".join([feed(c) for c in chunks]) + finish()
