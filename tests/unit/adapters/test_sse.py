from __future__ import annotations

import random

import orjson

from relay.adapters.json_codec import dumps, has_object_key, usage_object
from relay.adapters.sse import EventSplitter, event_data


def collect(chunks: list[bytes], splitter: EventSplitter | None = None) -> tuple[list[bytes], bytes]:
    splitter = splitter or EventSplitter()
    events: list[bytes] = []
    for chunk in chunks:
        buf, spans = splitter.split(chunk)
        events += [buf[s:a] for s, _e, a in spans]
    return events, splitter.take_rest()


def test_spans_cover_the_stream_exactly_in_any_chunking() -> None:
    stream = b"data: a\n\nevent: x\r\ndata: b\r\n\r\n: comment\n\n\n\ndata: c\r\n\r\ndata: tail"
    rng = random.Random(99)
    reference, rest = collect([stream])
    assert reference == [
        b"data: a\n\n",
        b"event: x\r\ndata: b\r\n\r\n",
        b": comment\n\n",
        b"\n\n",
        b"data: c\r\n\r\n",
    ]
    assert rest == b"data: tail"
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 12)))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert collect(chunks) == (reference, rest)


def test_whole_chunk_is_not_copied() -> None:
    chunk = b"data: a\n\n"
    buf, spans = EventSplitter().split(chunk)
    assert buf is chunk and spans == [(0, 7, 9)]


def test_overlong_event_is_handed_back_as_a_fragment() -> None:
    splitter = EventSplitter(max_held=10)
    buf, spans = splitter.split(b"data: 0123456789abcdef")
    assert spans == [(0, len(buf), len(buf))]
    assert splitter.held == b""


def test_event_data() -> None:
    buf = b'event: e\ndata: {"a":\ndata:1}\nid: 3'
    assert event_data(buf, 0, len(buf)) == b'{"a":\n1}'
    assert event_data(b": only a comment", 0, 16) is None
    crlf = b"event: e\r\ndata: x\r\n"
    assert event_data(crlf, 0, len(crlf)) == b"x"


def _data_by_lines(block: bytes) -> bytes | None:
    """The payload read line by line (the definition ``event_data``'s shortcut must agree with)."""
    data: bytes | None = None
    for line in block.splitlines() if b"\r" in block else block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[6:] if line[5:6] == b" " else line[5:]
            data = value if data is None else data + b"\n" + value
    return data


def test_event_data_agrees_with_reading_line_by_line_on_any_block() -> None:
    rng = random.Random(7)
    pieces = [b"data:", b"data: ", b"event: x", b"\n", b"\r\n", b"{}", b"data", b" ", b":", b"id: 1", b"x"]
    for _ in range(5000):
        block = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 7)))
        pad = rng.choice([b"", b"data: before\n\n"])
        buf = pad + block + rng.choice([b"", b"\n\n", b"data: after"])
        assert event_data(buf, len(pad), len(pad) + len(block)) == _data_by_lines(block), block


def test_has_object_key() -> None:
    assert has_object_key(b'{"usage" :\t{"a":1}}', b'"usage"')
    assert not has_object_key(b'{"usage":null}', b'"usage"')
    assert not has_object_key(b'{"text":"\\"usage\\": {"}', b'"usage"')
    assert not has_object_key(b'x"usage": {', b'"usage"', 0, 9)


def test_usage_object_from_the_tail() -> None:
    body = orjson.dumps({"data": [1] * 10, "usage": {"prompt_tokens": 3, "details": {"x": 1}}})
    assert usage_object(body, "prompt_tokens") == {"prompt_tokens": 3, "details": {"x": 1}}
    assert usage_object(body, "input_tokens") is None
    assert usage_object(b'{"usage": {"prompt_tokens": 3', "prompt_tokens") is None
    assert usage_object(b'{"usage": null}', "prompt_tokens") is None


def test_dumps_falls_back_for_big_ints_and_surrogates() -> None:
    assert orjson.loads(dumps({"a": 2**70})) == {"a": 2**70}
    assert dumps({"s": "\ud800"}) == b'{"s":"\\ud800"}'
