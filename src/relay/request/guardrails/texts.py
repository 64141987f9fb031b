"""Where the texts of a request or a whole response are, in every shape Relay speaks (SPEC §20).

What it does. :func:`slots` walks a parsed body and returns each text as a slot — the container and
the key (or index) that holds it — so a guardrail reads ``slot.text`` and a redaction writes
``slot.set(new)`` in place: the body keeps its shape and everything that is not text. The walk covers
OpenAI chat (``messages[].content`` as a string or ``text`` parts; tool messages), Anthropic messages
(``system``, ``text`` blocks, ``tool_result`` content), Responses (``instructions``, ``input`` as a
string or items, ``function_call_output.output``), embeddings ``input`` (strings, not token arrays),
Relay's canonical shape, and the same shapes' whole responses (``choices[].message``, ``content[]``,
``output[]``).

What it deliberately leaves alone: model names, roles, tool definitions, function-call arguments and
images (not text the caller wrote for the model to read as prose).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_TEXT_KEYS = ("system", "instructions", "prompt", "input", "messages", "content", "text", "output")
_RESPONSE_KEYS = ("choices", "message")
_KEYS = _TEXT_KEYS + _RESPONSE_KEYS  # in this order: a text's place in the list a webhook is sent
_NOT_TEXT = frozenset(("tool_use", "function_call", "image", "image_url", "input_image", "server_tool_use"))


@dataclass(slots=True)
class Slot:
    holder: dict[str, Any] | list[Any]
    at: str | int

    @property
    def text(self) -> str:
        return self.holder[self.at]  # type: ignore[index,no-any-return]

    def set(self, text: str) -> None:
        self.holder[self.at] = text  # type: ignore[index]


def slots(body: Any) -> list[Slot]:
    """Every text of a parsed request or whole response, in document order."""
    found: list[Slot] = []
    if isinstance(body, dict):
        _walk_object(body, found)
    return found


def _walk_object(node: dict[str, Any], found: list[Slot]) -> None:
    if node.get("type") in _NOT_TEXT:
        return
    for key in _KEYS:
        if key in node:
            _walk_value(node, key, found)


def _walk_value(holder: dict[str, Any] | list[Any], at: str | int, found: list[Slot]) -> None:
    value = holder[at]  # type: ignore[index]
    if isinstance(value, str):
        if value:
            found.append(Slot(holder, at))
    elif isinstance(value, dict):
        _walk_object(value, found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, str | dict | list):
                _walk_value(value, index, found)
