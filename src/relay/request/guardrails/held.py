"""A stream checked whole (SPEC §20): what a policy with an output webhook guardrail does to a stream.

Why. A webhook checks whole texts; asking it about every delta would cost a round trip per event and
could not redact a match split across deltas. So the stream is held: :meth:`HeldEvents.feed` keeps
every event (sends nothing) and reads the answer's texts (one per key, as the window would:
``shapes.py``); once the upstream has finished, :meth:`HeldEvents.settle` runs the policy's output
guardrails over those texts exactly as for a whole answer (``GuardrailStep.check``, in the policy's
order, regex and PII included, the webhook's ``fail`` mode and timeout as always) and gives back what
to send: ``allow`` → the held events as they came; ``redact`` → the held events with each text's deltas
rebuilt (one delta carrying the redacted text, just before the event that ends that text; the events
that repeat a text carry the redacted one; every other event kept); ``block`` → nothing, and
:attr:`blocked` is set (the caller is answered a 422 in its shape: nothing was sent yet).

The cost, by design: the caller's first byte waits for the end of the upstream's answer.
What it deliberately does not know: sockets, matchers, how the webhook is asked (``step``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from relay.domain.guardrails import Guardrail
from relay.request.guardrails.sse import GuardedEvents
from relay.request.guardrails.step import Asked, GuardrailBlocked, GuardrailStep


class _Collected:
    """A window that releases nothing and keeps the text it was fed."""

    __slots__ = ("acted", "blocked", "text")

    def __init__(self) -> None:
        self.text = ""
        self.blocked: Guardrail | None = None
        self.acted: list[Guardrail] = []

    def feed(self, text: str) -> str:
        self.text += text
        return ""

    def finish(self) -> str:
        return ""


class _Replaced:
    """A window that releases its replacement text once, when its text ends."""

    __slots__ = ("_text", "acted", "blocked")

    def __init__(self, text: str) -> None:
        self._text = text
        self.blocked: Guardrail | None = None
        self.acted: list[Guardrail] = []

    def feed(self, text: str) -> str:
        return ""

    def finish(self) -> str:
        text, self._text = self._text, ""
        return text


class HeldEvents:
    __slots__ = ("_held", "_reader", "_shape", "applied", "blocked")

    def __init__(self, shape: str) -> None:
        self._shape = shape
        self._held: list[bytes] = []
        self._reader = GuardedEvents(shape, _Collected)
        self.blocked: GuardrailBlocked | None = None
        self.applied: list[dict[str, str]] = []  # the usage event's ``guardrails`` (SPEC §20)

    def feed(self, chunk: bytes) -> bytes:
        """Keeps ``chunk``; nothing is sent before :meth:`settle`."""
        if chunk:
            self._held.append(chunk)
            self._reader.feed(chunk)
        return b""

    async def settle(self, step: GuardrailStep, guardrails: Sequence[Guardrail], asked: Asked) -> bytes:
        """What to send, once the upstream has finished (``b""`` and :attr:`blocked` set on a block)."""
        self._reader.finish()
        whole = b"".join(self._held)
        self._held = [whole]
        texts = [window.text for window in self._reader.windows.values()]  # type: ignore[attr-defined]
        if not texts:  # no answer text (a tool call only): nothing to ask about, as for whole answers
            return whole
        verdict = await step.check("output", guardrails, texts, asked)
        self.applied = verdict.applied
        if verdict.blocked is not None:
            self.blocked = GuardrailBlocked(verdict.blocked, "output")
            return b""
        if not verdict.changed:
            return whole
        # The same events in the same order meet their keys in the same order: the n-th window made is
        # the n-th text.
        replaced: Iterator[str] = iter(verdict.texts)
        rebuilt = GuardedEvents(self._shape, lambda: _Replaced(next(replaced)))
        return rebuilt.feed(whole) + rebuilt.finish()
