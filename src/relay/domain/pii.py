"""Finding personal data in free text for the guardrails' ``pii`` matcher (SPEC §20).

Why these detectors. Phone numbers are found by libphonenumber's own matcher (``phonenumbers``): the
formats of the world's numbering plans are its maintained data, nothing a hand-written pattern keeps
up with. The other types have a fixed syntax and a checksum where one exists, so each is a pattern
plus that check: card numbers pass Luhn, IBANs pass ISO 7064 mod 97, IPv4 octets are 0–255, US SSNs
skip the numbers the SSA never issues (area 000, 666, 9xx; group 00; serial 0000). Their false
positive rate is measured on the labelled corpus in ``tests/unit/domain/pii_corpus.py``.

Why the pre-checks. Python's regex engine costs ≈ 20 ns per character it tries a pattern at, so a
2 KB prompt costs 40–190 µs per detector even when nothing matches. An ASCII text (most prompts) is
first mapped with one ``bytes.translate`` (≈ 2 ns per character) to the characters a match could be
made of, and the pattern runs only if that map holds a run as long as the shortest match: a card
number is ≥ 13 characters of digits, spaces and dashes; an IPv4 address ≥ 7 of digits and dots; an
IBAN ≥ 15 of capitals, digits and spaces. No match is skipped: the check is a necessary condition.
Texts with other characters skip it (``\\d`` also matches other scripts' digits).

Invariants: a detector returns non-overlapping ``(start, end)`` spans in order; it reads the text
only (no I/O), and texts without a digit or an ``@`` cost one scan of the string.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

Span = tuple[int, int]

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.]*\d)")
# Patterns that start with a digit (no lookbehind tried at every position: half the scan's cost); the
# neighbours are checked in Python for the few candidates.
_SSN = re.compile(r"(\d{3})-(\d{2})-(\d{4})")
_CARD = re.compile(r"\d[\d -]{11,40}\d")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_DIGITS = re.compile(r"\d")
_NUMBER_CHARS = frozenset("0123456789-")


def _ascii_map(kept: bytes) -> bytes:
    """A ``bytes.translate`` table: the ``kept`` bytes → ``0``, every other byte → ``x``."""
    return bytes(0x30 if b in kept else 0x78 for b in range(256))


_DIGIT_BYTES = b"0123456789"
_CARD_CHARS = _ascii_map(_DIGIT_BYTES + b" -")
_IPV4_CHARS = _ascii_map(_DIGIT_BYTES + b".")
_IBAN_CHARS = _ascii_map(_DIGIT_BYTES + b" ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_CARD_RUN = b"0" * 13  # \d[\d -]{11,40}\d
_IPV4_RUN = b"0" * 7  # (?:\d{1,3}\.){3}\d{1,3}
_IBAN_RUN = b"0" * 15  # [A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}


def _may_hold(text: str, chars: bytes, run: bytes) -> bool:
    """False only when no match can be in ``text``: it is ASCII and has no ``len(run)`` characters in a
    row of those ``chars`` keeps (see the module docstring)."""
    if not text.isascii():
        return True
    return run in text.encode("ascii").translate(chars)


def _email(text: str) -> list[Span]:
    if "@" not in text:
        return []
    return [m.span() for m in _EMAIL.finditer(text)]


def _ipv4(text: str) -> list[Span]:
    if not _may_hold(text, _IPV4_CHARS, _IPV4_RUN):
        return []
    spans = []
    for m in _IPV4.finditer(text):
        try:
            ipaddress.IPv4Address(m.group())
        except ValueError:
            continue
        spans.append(m.span())
    return spans


def _glued(text: str, start: int, end: int) -> bool:
    """Whether the candidate continues a longer number (a digit or a dash right before or after it)."""
    return (start > 0 and text[start - 1] in _NUMBER_CHARS) or (
        end < len(text) and text[end] in _NUMBER_CHARS
    )


def _us_ssn(text: str) -> list[Span]:
    if "-" not in text:
        return []
    spans = []
    for m in _SSN.finditer(text):
        area, group, serial = m.groups()
        if _glued(text, m.start(), m.end()):
            continue
        if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
            continue
        spans.append(m.span())
    return spans


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _credit_card(text: str) -> list[Span]:
    if not _may_hold(text, _CARD_CHARS, _CARD_RUN):
        return []
    spans = []
    for m in _CARD.finditer(text):
        group = m.group()
        if (
            "  " in group
            or "--" in group
            or " -" in group
            or "- " in group
            or _glued(text, m.start(), m.end())
        ):
            continue  # one separator at most between digits, and not part of a longer number
        digits = group.replace(" ", "").replace("-", "")
        if 13 <= len(digits) <= 19 and digits[0] != "0" and luhn_valid(digits):
            spans.append(m.span())
    return spans


def iban_valid(candidate: str) -> bool:
    compact = candidate.replace(" ", "")
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(c, 36)) for c in rearranged)
    return int(number) % 97 == 1


def _iban(text: str) -> list[Span]:
    if not _may_hold(text, _IBAN_CHARS, _IBAN_RUN):
        return []
    return [m.span() for m in _IBAN.finditer(text) if iban_valid(m.group())]


def _phone(text: str) -> list[Span]:
    # libphonenumber's matcher is the costly detector: a text with fewer than 7 digits holds no number.
    if len(_DIGITS.findall(text)) < 7:
        return []
    import phonenumbers  # imported on first use: a relay without a phone guardrail never loads its data

    matcher = phonenumbers.PhoneNumberMatcher(text, "US", leniency=phonenumbers.Leniency.VALID)
    return [(m.start, m.end) for m in matcher]


DETECTORS: dict[str, Callable[[str], list[Span]]] = {
    "email": _email,
    "phone": _phone,
    "credit_card": _credit_card,
    "iban": _iban,
    "ipv4": _ipv4,
    "us_ssn": _us_ssn,
}


def find(pii_type: str, text: str) -> list[Span]:
    """The spans of ``text`` that hold ``pii_type`` (one of :data:`DETECTORS`)."""
    return DETECTORS[pii_type](text)
