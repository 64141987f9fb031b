"""Timestamps as every Relay API writes them: RFC 3339 in UTC with a ``Z``.

What it does. :func:`rfc3339` renders a datetime for a JSON answer. What it deliberately does not
know: where the value came from; a naive datetime is taken to be UTC (SQLite hands timestamps back
without a zone; the store's columns are UTC).

Invariants. Any aware value is converted to UTC first, so two instants that are equal render alike;
``None`` stays ``None`` (an absent timestamp is ``null`` on the wire).
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
