"""Query-string rules shared by the control plane's listing routes (usage events and summary, the admin
batch list): unknown or repeated parameters, ``limit``, and RFC 3339 ``from``/``to``.

What it deliberately does not know: which parameters a route takes (the caller passes its set) or
what the values filter. Every refusal is an ``InvalidRequest`` naming the parameter (400).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime

from relay.errors import InvalidRequest


def single_params(items: Iterable[tuple[str, str]], allowed: frozenset[str] | None = None) -> dict[str, str]:
    """The query parameters as a dict; a repeated one, or (with ``allowed``) an unknown one → 400."""
    out: dict[str, str] = {}
    for name, value in items:
        if allowed is not None and name not in allowed:
            raise InvalidRequest(f"unknown query parameter {name!r}; known: {', '.join(sorted(allowed))}")
        if name in out:
            raise InvalidRequest(f"{name}: given more than once")
        out[name] = value
    return out


def parse_choice(name: str, raw: str, choices: Sequence[str]) -> str:
    """``raw`` when it is one of ``choices``; else a 400 naming ``name`` and every choice."""
    if raw not in choices:
        raise InvalidRequest(f"{name}: must be one of {'|'.join(choices)}, got {raw!r}")
    return raw


def check_range(start: datetime | None, end: datetime | None) -> None:
    """``from`` and ``to`` (either may be absent) must not be out of order."""
    if start is not None and end is not None and start > end:
        raise InvalidRequest("from: must not be after to")


def check_cursor(cursor: str | None, decode: Callable[[str], object]) -> None:
    """A ``cursor`` given must be one ``decode`` reads (a 400 naming it, with why, otherwise)."""
    if cursor is not None:
        try:
            decode(cursor)
        except ValueError as exc:
            raise InvalidRequest(f"cursor: {exc}") from None


def parse_limit(raw: str | None, *, default: int, maximum: int) -> int:
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= maximum:
        raise InvalidRequest(f"limit: must be an integer from 1 to {maximum}, got {raw!r}")
    return int(raw)


def parse_timestamp(name: str, raw: str) -> datetime:
    """An RFC 3339 instant with its offset; one that is not a UTC instant (before year 1 or after
    9999 once converted) is refused too."""
    # An unencoded '+' in a query string arrives as a space: "…T10:00:00 02:00" means "+02:00".
    candidates = (raw, raw.replace(" ", "+")) if " " in raw else (raw,)
    for candidate in candidates:
        try:
            value = datetime.fromisoformat(candidate)
        except ValueError:
            continue
        if value.tzinfo is None:
            raise InvalidRequest(f"{name}: needs a UTC offset (RFC 3339, e.g. 2026-01-31T00:00:00Z)")
        try:
            value.astimezone(UTC)  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC: no such instant
        except OverflowError:
            raise InvalidRequest(
                f"{name}: outside 0001-01-01T00:00:00Z–9999-12-31T23:59:59Z: {raw[:64]!r}"
            ) from None
        return value
    raise InvalidRequest(f"{name}: not an RFC 3339 timestamp: {raw[:64]!r}")
