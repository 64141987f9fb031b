"""Server-sent-event framing over a byte stream whose chunk boundaries fall anywhere.

What it knows: an SSE event ends with a blank line — ``\\n\\n``, or ``\\r\\n\\r\\n`` from servers that
end lines with CRLF (bare-CR line endings are not used by any provider Relay speaks to and are not
recognised) — and its payload is the ``data:`` lines, joined by ``\\n``.

What it deliberately does not know: what the events mean. ``EventSplitter`` hands back positions, not
copies, so callers can look for a marker (``bytes.find`` with bounds) before paying for a slice or a
JSON parse.

Invariants: the spans of one ``split`` plus the held remainder cover the buffer exactly, in order, so a
filter that re-emits every span (possibly rewritten) and finally the remainder loses no byte. An event
that grows past ``max_held`` bytes without ending is handed back as a fragment (span with an empty
terminator) instead of being buffered without bound.
"""

from __future__ import annotations

from typing import Any

from .json_codec import dumps

MAX_EVENT_BYTES = 16 * 1024 * 1024
"""An event still open after this many bytes is passed on as a fragment (a stream filter's memory bound)."""

Span = tuple[int, int, int]
"""``(start, end, after)``: ``buf[start:end]`` is an event without its blank line, ``buf[end:after]`` the
blank line (empty for a fragment)."""


class EventSplitter:
    """Cuts the stream into events, holding back the bytes of an event that has not ended yet."""

    __slots__ = ("_held", "max_held")

    def __init__(self, max_held: int = MAX_EVENT_BYTES) -> None:
        self._held = b""
        self.max_held = max_held

    @property
    def held(self) -> bytes:
        """Bytes of the event in progress (not yet returned in a span)."""
        return self._held

    def split(self, chunk: bytes) -> tuple[bytes, list[Span]]:
        """``(buf, spans)``: ``buf`` is the held bytes followed by ``chunk`` (``chunk`` itself, uncopied,
        when nothing was held); every complete event in it is a span; the rest is held for next time."""
        buf = self._held + chunk if self._held else chunk
        spans: list[Span] = []
        pos = 0
        next_lf = buf.find(b"\n\n")
        next_crlf = buf.find(b"\r\n\r\n") if b"\r" in buf else -1
        while next_lf != -1 or next_crlf != -1:
            if next_lf != -1 and (next_crlf == -1 or next_lf < next_crlf):
                end, after = next_lf, next_lf + 2
            else:
                end, after = next_crlf, next_crlf + 4
            spans.append((pos, end, after))
            pos = after
            if next_lf != -1 and next_lf < pos:
                next_lf = buf.find(b"\n\n", pos)
            if next_crlf != -1 and next_crlf < pos:
                next_crlf = buf.find(b"\r\n\r\n", pos)
        rest = len(buf) - pos
        if rest > self.max_held:
            spans.append((pos, len(buf), len(buf)))
            self._held = b""
        else:
            self._held = buf[pos:] if rest else b""
        return buf, spans

    def take_rest(self) -> bytes:
        """The held bytes (an event the stream never ended), clearing them."""
        rest, self._held = self._held, b""
        return rest


def event_data(buf: bytes, start: int, end: int) -> bytes | None:
    """The payload of the event ``buf[start:end]``: its ``data:`` lines joined by ``\\n``; None if none."""
    last = buf.rfind(b"\n", start, end) + 1 or start
    if (
        buf.startswith(b"data:", last, end)
        and buf.find(b"data:", start, last) == -1
        and buf.find(b"\r", start, end) == -1
    ):  # the usual event: one data line, its last (no copy of the block, no split)
        return buf[last + 6 : end] if last + 5 < end and buf[last + 5] == 0x20 else buf[last + 5 : end]
    block = buf[start:end]
    lines = block.splitlines() if b"\r" in block else block.split(b"\n")
    data: bytes | None = None
    for line in lines:
        if line.startswith(b"data:"):
            value = line[6:] if line[5:6] == b" " else line[5:]
            data = value if data is None else data + b"\n" + value
    return data


def named_event(name: bytes, payload: Any) -> bytes:
    """One ``event:``/``data:`` event, blank line included."""
    return b"event: " + name + b"\ndata: " + dumps(payload) + b"\n\n"
