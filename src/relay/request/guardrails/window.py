"""Output guardrails on a stream (SPEC §20): text checked as it arrives, over a window of characters.

What it does. :class:`StreamWindow` takes the answer's text piece by piece and gives back what may be
sent now. It holds back the last ``window`` characters (``RELAY_GUARDRAIL_STREAM_WINDOW``, 256), so a
match of up to that length split across pieces is seen whole before any of it is released: a ``redact``
guardrail's match is replaced, a ``block`` guardrail's match stops the stream before any character of
the held text — the match included — is released. Redactions never straddle what was released: the
release point moves back to the start of a match that crosses it. The redact guardrails read the
answer's own text together (their matches merged), not one another's replacements.

Invariants: for matches no longer than the window, the concatenation of everything released equals
the whole text with every match replaced, whatever the chunking (the property test in
``tests/unit/request/guardrails/test_window.py``); nothing is released after a block.
What it deliberately does not know: SSE, shapes, webhooks (a webhook is asked about whole answers only).
"""

from __future__ import annotations

from collections.abc import Sequence

from relay.domain.guardrails import Guardrail, Match, merged, replace

DEFAULT_WINDOW = 256
#: Characters of released text still shown to the matchers (not released again): a detector that looks
#: at a match's neighbours (a digit before an SSN) sees the same neighbours as on the whole text.
CONTEXT = 16


class StreamWindow:
    __slots__ = ("_block", "_context", "_held", "_redact", "_window", "acted", "blocked")

    def __init__(self, guardrails: Sequence[Guardrail], window: int = DEFAULT_WINDOW) -> None:
        self._block = tuple(g for g in guardrails if g.webhook is None and g.action == "block")
        self._redact = tuple(g for g in guardrails if g.webhook is None and g.action == "redact")
        self._window = window
        self._held = ""
        self._context = ""
        self.blocked: Guardrail | None = None
        self.acted: list[Guardrail] = []  # redact guardrails that replaced something, once each

    def feed(self, text: str) -> str:
        """What of the text so far may be sent now ("" once blocked)."""
        if self.blocked is not None:
            return ""
        self._held += text
        if self._blocked():
            return ""
        cut = len(self._held) - self._window
        if cut <= 0:
            return ""
        spans = self._spans()
        for start, end, _ in spans:
            if start < cut < end:
                cut = start
                break
        released = replace(self._held[:cut], [s for s in spans if s[1] <= cut])
        self._context = (self._context + self._held[:cut])[-CONTEXT:]
        self._held = self._held[cut:]
        return released

    def finish(self) -> str:
        """The rest, once the answer's text has ended ("" when blocked)."""
        if self.blocked is not None or self._blocked():
            return ""
        released = replace(self._held, self._spans())
        self._held = ""
        return released

    def _blocked(self) -> bool:
        for guardrail in self._block:
            if guardrail.matches(self._context + self._held):
                self.blocked = guardrail
                self._held = ""
                return True
        return False

    def _spans(self) -> list[Match]:
        found: list[Match] = []
        shift = len(self._context)
        text = self._context + self._held
        for guardrail in self._redact:
            # Spans in the held text only (the context was released already).
            spans = [(s - shift, e - shift, label) for s, e, label in guardrail.spans(text) if s >= shift]
            if spans and guardrail not in self.acted:
                self.acted.append(guardrail)
            found.extend(spans)
        return merged(found)
