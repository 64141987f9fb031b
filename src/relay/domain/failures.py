"""Why batch items failed, grouped by cause (SPEC §10.4), for the admin batch API and the dashboard.

A discarded item's ``error`` starts with one of the §10.4 prefixes. :func:`cause_of` maps an error
to its cause: the prefix with its placeholders filled in where they tell causes apart (the upstream
status, the host), and cut before the free text otherwise (``routing: …`` is one cause whatever the
model). Pure: no I/O, so the grouping is tested without a database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

# (pattern, how the cause is written). Order matters only where prefixes could overlap (none do).
_CAUSES: Final = (
    (re.compile(r"^upstream returned (\d{3})"), "upstream returned {0}"),
    (re.compile(r'^all keys of host "([^"]*)" failed'), 'all keys of host "{0}" failed'),
    (re.compile(r'^no healthy keys for host "([^"]*)"'), 'no healthy keys for host "{0}"'),
    (re.compile(r"^routing: "), "routing"),
    (re.compile(r"^cross-shape dispatch: "), "cross-shape dispatch"),
    (re.compile(r"^rate limit exceeded: "), "rate limit exceeded"),
    (re.compile(r"^budget exceeded: "), "budget exceeded"),
    (re.compile(r"^credential no longer valid: "), "credential no longer valid"),
    (re.compile(r"^policy unavailable: "), "policy unavailable"),
    (re.compile(r"^timeout: "), "timeout"),
    (re.compile(r"^load input: "), "load input"),
    (re.compile(r"^worker lost: "), "worker lost"),
    (re.compile(r"^expired: "), "expired"),  # §14/§15: not final when the batch expired
)
OTHER: Final = "other"
EXAMPLES: Final = 3  # distinct error texts kept per cause


def cause_of(error: str) -> str:
    """The §10.4 cause of one discarded item's error (``"other"`` for anything unrecognised)."""
    for pattern, template in _CAUSES:
        match = pattern.match(error)
        if match is not None:
            return template.format(*match.groups())
    return OTHER


def group_failures(errors: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """``[(error text, item count)]`` → ``[{"cause", "count", "examples"}]``, most items first.

    ``examples`` holds up to :data:`EXAMPLES` distinct error texts of the cause, the commonest first."""
    groups: dict[str, dict[str, Any]] = {}
    for error, count in sorted(errors, key=lambda pair: (-pair[1], pair[0])):
        cause = cause_of(error)
        group = groups.setdefault(cause, {"cause": cause, "count": 0, "examples": []})
        group["count"] += count
        if len(group["examples"]) < EXAMPLES:
            group["examples"].append(error)
    return sorted(groups.values(), key=lambda g: (-g["count"], g["cause"]))
