"""A stored guardrail as the hot path uses it (SPEC §20): compiled once per snapshot, then only run.

What it does. :class:`Guardrail` holds a validated guardrail's matcher in its runnable form — regex
patterns compiled, PII types as detector functions — and answers the one question the request step
asks: for a text, the matches (``spans``), and the text with each match replaced (``redacted``:
``[REDACTED]`` for a pattern, ``[REDACTED:<type>]`` for PII). A webhook guardrail carries only its
settings: asking another service is I/O, the request step's business (``relay.request.guardrails``).

Invariants: pure (no I/O); ``redacted(text) == text`` exactly when ``spans(text)`` is empty.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from relay.domain.guardrail_spec import WebhookMatcher
from relay.domain.pii import find

REDACTED = "[REDACTED]"
Match = tuple[int, int, str]  # start, end, replacement


@dataclass(frozen=True, slots=True)
class Guardrail:
    id: str
    name: str
    stage: str  # "input" | "output"
    action: str  # "block" | "redact" (a webhook's answer decides instead)
    message: str
    patterns: tuple[re.Pattern[str], ...] = ()
    pii: tuple[str, ...] = ()
    webhook: WebhookMatcher | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Guardrail:
        hook = row.get("webhook")
        return cls(
            row["id"],
            row["name"],
            row["stage"],
            row["action"],
            row.get("message") or "",
            tuple(re.compile(p) for p in row.get("regex") or ()),
            tuple(row.get("pii") or ()),
            WebhookMatcher.model_validate(hook) if hook else None,
        )

    def spans(self, text: str) -> list[Match]:
        """Non-overlapping matches in text order, each with what replaces it on a redact."""
        found: list[Match] = []
        for pattern in self.patterns:
            for m in pattern.finditer(text):
                found.append((m.start(), m.end(), REDACTED))
        for pii_type in self.pii:
            pii_spans = find(pii_type, text)
            if pii_spans:  # the usual text holds none: no label, no generator
                label = f"[REDACTED:{pii_type}]"
                found.extend((start, end, label) for start, end in pii_spans)
        return merged(found)

    def redacted(self, text: str) -> str:
        return replace(text, self.spans(text))

    def matches(self, text: str) -> bool:
        for pattern in self.patterns:
            if pattern.search(text):
                return True
        return any(find(pii_type, text) for pii_type in self.pii)


def merged(found: list[Match]) -> list[Match]:
    """Matches in text order without overlaps: overlapping ones become one, labelled by the earliest."""
    if len(found) < 2:
        return found
    found.sort()
    kept: list[Match] = []
    for match in found:
        if kept and match[0] < kept[-1][1]:
            if match[1] > kept[-1][1]:
                kept[-1] = (kept[-1][0], match[1], kept[-1][2])
            continue
        kept.append(match)
    return kept


def replace(text: str, spans: list[Match]) -> str:
    if not spans:
        return text
    out, at = [], 0
    for start, end, label in spans:
        out.append(text[at:start])
        out.append(label)
        at = end
    out.append(text[at:])
    return "".join(out)
