"""The internal representation every cross-shape translation goes through (SPEC §7.3).

What it knows: the meaning a live request, response and stream event carry, independent of any wire
shape — system text, turns made of parts (text, image, tool call, tool result), tools and the tool
choice, sampling and length limits, the end-user id; a response's parts, normalised stop reason and
usage; and the small vocabulary of stream events (``Start``, ``TextDelta``, ``ToolStart``, ``ToolArgs``,
``UsageUpdate``, ``Stop``, ``StreamError``, ``End``). Each shape has two halves that map to and from
these types (``relay.adapters.<shape>_ir`` for bodies, ``<shape>_sse`` for streams), so a pair of shapes
is never a hand-written A↔B converter.

What it deliberately does not know: any wire field name, JSON, transport.

Invariants: plain value objects (``==`` compares meaning, which the property tests rely on); a stop
reason is one of ``STOP_REASONS`` (Anthropic's vocabulary, the richest); ``Usage.input_tokens``
includes ``cached_tokens`` and ``cache_write_tokens`` (OpenAI's convention, as ``relay.adapters.base``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

END_TURN: Final = "end_turn"
MAX_TOKENS: Final = "max_tokens"
STOP_SEQUENCE: Final = "stop_sequence"
TOOL_USE: Final = "tool_use"
CONTENT_FILTER: Final = "content_filter"
REFUSAL: Final = "refusal"
STOP_REASONS: Final = frozenset({END_TURN, MAX_TOKENS, STOP_SEQUENCE, TOOL_USE, CONTENT_FILTER, REFUSAL})


@dataclass(slots=True)
class Text:
    text: str


@dataclass(slots=True)
class Image:
    """An image by URL (``https:`` …) or inline (``media_type`` + base64 ``data``); ``data:`` URLs are
    always split into the inline form, so every shape compares equal."""

    url: str | None = None
    media_type: str | None = None
    data: str | None = None


@dataclass(slots=True)
class ToolCall:
    """An assistant's call of a tool; ``arguments`` is the JSON text of the input object."""

    id: str
    name: str
    arguments: str


@dataclass(slots=True)
class ToolResult:
    call_id: str
    content: list[Text | Image]
    is_error: bool = False


Part = Text | Image | ToolCall | ToolResult


@dataclass(slots=True)
class Message:
    role: str  # "user" | "assistant"
    parts: list[Part]


@dataclass(slots=True)
class Tool:
    name: str
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


@dataclass(slots=True)
class Request:
    """A live request's meaning. ``tool_choice`` is ``auto``/``none``/``required`` or ``tool`` (then
    ``tool_name`` names it); ``include_usage`` is an OpenAI chat caller's ``stream_options``."""

    model: str
    messages: list[Message]
    system: list[str] = field(default_factory=list)
    tools: list[Tool] | None = None
    tool_choice: str | None = None
    tool_name: str | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: list[str] | None = None
    user: str | None = None
    stream: bool = False
    include_usage: bool = False
    stop_param: str = field(default="stop", compare=False)  # the caller's name for ``stop`` (refusals)


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0  # all input, cached reads and cache writes included
    output_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(slots=True)
class Response:
    id: str
    model: str
    content: list[Text | ToolCall]
    stop: str = END_TURN
    stop_sequence: str | None = None
    usage: Usage = field(default_factory=Usage)
    created: int | None = None


# -- stream events -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Start:
    id: str
    created: int | None = None


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ToolStart:
    index: int  # ordinal of the tool call in this response (0, 1, …)
    id: str
    name: str


@dataclass(slots=True)
class ToolArgs:
    index: int
    fragment: str


@dataclass(slots=True)
class UsageUpdate:
    """Usage so far; the latest update replaces the earlier ones."""

    usage: Usage


@dataclass(slots=True)
class Stop:
    reason: str
    sequence: str | None = None


@dataclass(slots=True)
class StreamError:
    type: str
    message: str


@dataclass(slots=True)
class End:
    pass


Event = Start | TextDelta | ToolStart | ToolArgs | UsageUpdate | Stop | StreamError | End


def response_events(response: Response) -> list[Event]:
    """The stream that carries ``response`` (used by tests and to render a whole answer as events)."""
    events: list[Event] = [Start(response.id, response.created)]
    tools = 0
    for part in response.content:
        if isinstance(part, Text):
            events.append(TextDelta(part.text))
        else:
            events.append(ToolStart(tools, part.id, part.name))
            events.append(ToolArgs(tools, part.arguments))
            tools += 1
    events += [UsageUpdate(response.usage), Stop(response.stop, response.stop_sequence), End()]
    return events


class Collector:
    """Folds stream events back into a ``Response`` (the property tests' "final message")."""

    def __init__(self, model: str) -> None:
        self.response = Response("", model, [])
        self._tools: dict[int, ToolCall] = {}
        self.error: StreamError | None = None
        self.ended = False

    def take(self, event: Event) -> None:
        r = self.response
        if isinstance(event, Start):
            r.id, r.created = event.id, event.created
        elif isinstance(event, TextDelta):
            if r.content and isinstance(r.content[-1], Text):
                r.content[-1].text += event.text
            else:
                r.content.append(Text(event.text))
        elif isinstance(event, ToolStart):
            call = ToolCall(event.id, event.name, "")
            self._tools[event.index] = call
            r.content.append(call)
        elif isinstance(event, ToolArgs):
            if event.index in self._tools:
                self._tools[event.index].arguments += event.fragment
        elif isinstance(event, UsageUpdate):
            r.usage = event.usage
        elif isinstance(event, Stop):
            r.stop, r.stop_sequence = event.reason, event.sequence
        elif isinstance(event, StreamError):
            self.error = event
        else:
            self.ended = True


def image_from_url(url: str) -> Image:
    """``data:<type>;base64,<data>`` → the inline form; any other URL stays a URL."""
    if url.startswith("data:"):
        head, sep, data = url.partition(",")
        if sep and head.endswith(";base64"):
            return Image(media_type=head[5:-7] or None, data=data)
    return Image(url=url)


def image_url(image: Image) -> str:
    """The URL form of ``image`` (inline images become a ``data:`` URL)."""
    if image.url is not None:
        return image.url
    return f"data:{image.media_type or 'application/octet-stream'};base64,{image.data or ''}"
