"""Cross-shape translation of live requests (SPEC §7.3): the hub that pairs two halves through the IR.

What it knows: for each provider shape, its reader and writer of requests and responses
(``relay.adapters.<shape>_ir``) and its stream decoder and encoder (``<shape>_sse``). A translation
from shape A to adapter B is always A's reader then B's writer (and back for the answer), never a
hand-written A↔B converter, so adding a shape adds two halves, not one converter per pair.
Also: an upstream error body of either provider shape becomes the caller's error shape with the same
status (``translate_error``).

What it deliberately does not know: which pairs are admitted (``relay.adapters.admission``), the
upstream model name (``build_upstream_request`` rewrites ``model``), sockets, timing.

Invariants: requests are refused (``AdapterError`` 400 ``unsupported_parameter`` or
``invalid_request``) before anything is sent; ``TranslatingStream`` buffers at most one upstream
event (the one not yet ended) and always ends the caller's stream with either its terminal event or
one error event of the caller's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol

from relay.http.errors import error_body

from . import ir
from .anthropic_ir import (
    request_from_anthropic,
    request_to_anthropic,
    response_from_anthropic,
    response_to_anthropic,
)
from .anthropic_sse import AnthropicDecoder, AnthropicEncoder
from .base import ANTHROPIC, OPENAI, OPENAI_RESPONSES
from .chat_ir import request_from_chat, request_to_chat, response_from_chat, response_to_chat
from .chat_sse import ChatDecoder, ChatEncoder
from .json_codec import dumps, loads
from .responses_ir import (
    request_from_responses,
    request_to_responses,
    response_from_responses,
    response_to_responses,
)
from .responses_sse import ResponsesDecoder, ResponsesEncoder
from .sse import EventSplitter, event_data


class Decoder(Protocol):
    def take(self, event: dict[str, Any]) -> list[ir.Event]: ...

    def done(self) -> list[ir.Event]: ...


class Encoder(Protocol):
    ended: bool

    def take(self, event: ir.Event) -> bytes: ...


READ_REQUEST: Final[dict[str, Callable[[dict[str, Any], str], ir.Request]]] = {
    OPENAI: request_from_chat,
    ANTHROPIC: request_from_anthropic,
    OPENAI_RESPONSES: request_from_responses,
}
READ_RESPONSE: Final[dict[str, Callable[[dict[str, Any]], ir.Response]]] = {
    OPENAI: response_from_chat,
    ANTHROPIC: response_from_anthropic,
    OPENAI_RESPONSES: response_from_responses,
}
WRITE_RESPONSE: Final[dict[str, Callable[[ir.Response, str], dict[str, Any]]]] = {
    OPENAI: response_to_chat,
    ANTHROPIC: response_to_anthropic,
    OPENAI_RESPONSES: response_to_responses,
}
DECODERS: Final[dict[str, Callable[[], Decoder]]] = {
    OPENAI: ChatDecoder,
    ANTHROPIC: AnthropicDecoder,
    OPENAI_RESPONSES: ResponsesDecoder,
}
ENCODERS: Final[dict[str, Callable[[str, bool], Encoder]]] = {
    OPENAI: ChatEncoder,
    ANTHROPIC: AnthropicEncoder,
    OPENAI_RESPONSES: ResponsesEncoder,
}


def write_request(adapter: str, req: ir.Request, default_max_tokens: int) -> dict[str, Any]:
    if adapter == OPENAI:
        return request_to_chat(req)
    if adapter == ANTHROPIC:
        return request_to_anthropic(req, default_max_tokens)
    return request_to_responses(req)


def translate_request(
    inbound: str, adapter: str, body: dict[str, Any], *, default_max_tokens: int
) -> tuple[dict[str, Any], ir.Request]:
    """The upstream body for ``adapter`` equivalent to the caller's ``body`` (shape ``inbound``), and
    the IR it went through (the stream translator needs ``include_usage``)."""
    req = READ_REQUEST[inbound](body, adapter)
    if not req.tools:
        # Without tools these ask for nothing, and the providers refuse them (OpenAI: "only allowed
        # when tools are specified"; Anthropic likewise for tool_choice).
        req.tool_choice = req.tool_name = req.parallel_tool_calls = None
    return write_request(adapter, req, default_max_tokens), req


def translate_response(adapter: str, inbound: str, body: bytes, *, model: str) -> bytes:
    """The caller's response for an upstream 2xx ``body``; ``ValueError`` if it is not a JSON object."""
    parsed = loads(body)
    if not isinstance(parsed, dict):
        raise ValueError("upstream response is not a JSON object")
    return dumps(WRITE_RESPONSE[inbound](READ_RESPONSE[adapter](parsed), model))


def upstream_error_message(body: bytes | None, status: int) -> str:
    """The message of an OpenAI- or Anthropic-shaped error body (both put it at ``error.message``)."""
    message = _error_message(body)
    return message if message else f"upstream returned {status}"


PROVIDER_MESSAGE_CHARS: Final = 300
"""How much of a provider's error message a batch item's error keeps (it is stored per item, shown in
results, usage events and the admin API's failure groups)."""


def provider_error_message(body: bytes | None) -> str | None:
    """The provider's own ``error.message`` of a non-2xx body (OpenAI or Anthropic shape) as one line:
    whitespace and control characters folded to single spaces, at most ``PROVIDER_MESSAGE_CHARS``
    (cut with "…"). Only that string is kept, never the rest of the body. None when there is none."""
    message = _error_message(body)
    if not message:
        return None
    line = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    if len(line) > PROVIDER_MESSAGE_CHARS:
        line = line[: PROVIDER_MESSAGE_CHARS - 1].rstrip() + "…"
    return line or None


def _error_message(body: bytes | None) -> str | None:
    try:
        parsed = loads(body or b"")
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else None


def translate_error(error_shape: str, status: int, body: bytes | None) -> bytes:
    """An upstream non-2xx answer in the caller's error shape, keeping its message."""
    return error_body(
        error_shape, status=status, code="upstream_error", message=upstream_error_message(body, status)
    )


class TranslatingStream:
    """Feed it every upstream chunk in order; send what ``feed`` returns; call ``finish`` at the end
    (or ``fail`` when the upstream connection broke)."""

    __slots__ = ("_decoder", "_encoder", "_splitter")

    def __init__(self, adapter: str, inbound: str, *, model: str, include_usage: bool = False) -> None:
        self._splitter = EventSplitter()
        self._decoder = DECODERS[adapter]()
        self._encoder = ENCODERS[inbound](model, include_usage)

    def feed(self, chunk: bytes) -> bytes:
        buf, spans = self._splitter.split(chunk)
        if not spans:
            return b""
        out = [self._event(buf, start, end) for start, end, _after in spans]
        return b"".join(out)

    def _event(self, buf: bytes, start: int, end: int) -> bytes:
        data = event_data(buf, start, end)
        if data is None or self._encoder.ended:
            return b""
        if data == b"[DONE]":
            events = self._decoder.done()
        else:
            try:
                parsed = loads(data)
            except ValueError:
                return b""
            if not isinstance(parsed, dict):
                return b""
            events = self._decoder.take(parsed)
        if len(events) == 1:
            return self._encoder.take(events[0])
        return b"".join([self._encoder.take(event) for event in events])

    def finish(self) -> bytes:
        rest = self._splitter.take_rest()
        out = self._event(rest, 0, len(rest)) if rest else b""
        if not self._encoder.ended:
            out += self.fail("upstream stream ended before its last event")
        return out

    def fail(self, message: str) -> bytes:
        """The caller's error event (once), for an upstream that broke mid-stream."""
        return self._encoder.take(ir.StreamError("api_error", message))
