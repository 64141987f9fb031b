"""How a batch ended, as the dashboard says it (SPEC §16: "a batch's state says how it ended:
completed, completed with failures (the failed share visible), cancelled, expired").

Why here: the batch API's ``state`` is ``completed`` for any batch whose items are all final, so a
batch with 1 999 of 2 000 items failed showed a green "completed". :func:`outcome` reads the state
and the item counts the listing already has (no extra query): a finished batch not cancelled by its
owner with cancelled items was stopped by its expiry (only a cancel or an expiry cancels items, and a
cancel marks the batch ``cancelled``).

:func:`segments` is the stacked bar's geometry (completed, failed, cancelled, running, waiting as
shares of the total), drawn as SVG rectangles because the CSP forbids inline styles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from relay.control.dashboard.formats import count, share

# The stacked bar's parts, in drawing order: (item state, what the legend calls it).
PARTS: Final = (
    ("completed", "completed"),
    ("discarded", "failed"),
    ("cancelled", "cancelled"),
    ("running", "running"),
    ("available", "waiting"),
)
BAR_WIDTH: Final = 200


@dataclass(frozen=True, slots=True)
class Outcome:
    key: str  # a CSS-safe word: completed, failures, cancelled, expired, in_progress
    label: str  # what the badge says
    detail: str  # the failed share, when there is one


@dataclass(frozen=True, slots=True)
class Segment:
    state: str
    name: str
    x: float
    width: float
    items: int


def outcome(batch: Mapping[str, Any]) -> Outcome:
    counts: Mapping[str, int] = batch.get("counts") or {}
    total = int(batch.get("total_items") or sum(counts.values()))
    failed = int(counts.get("discarded", 0))
    detail = f"{count(failed)} of {count(total)} failed ({share(failed, total)})" if failed else ""
    state = batch.get("state")
    if state == "in_progress":
        return Outcome("in_progress", "in progress", detail)
    if state == "cancelled":
        return Outcome("cancelled", "cancelled", detail)
    if counts.get("cancelled"):
        return Outcome("expired", "expired", detail)
    if failed:
        return Outcome("failures", "completed with failures", detail)
    return Outcome("completed", "completed", "")


def segments(batch: Mapping[str, Any]) -> list[Segment]:
    counts: Mapping[str, int] = batch.get("counts") or {}
    total = int(batch.get("total_items") or sum(counts.values())) or 1
    out, x = [], 0.0
    for state, name in PARTS:
        n = int(counts.get(state, 0))
        if n:
            width = BAR_WIDTH * n / total
            out.append(Segment(state, name, x, max(width, 1.0), n))  # one item in a million stays visible
            x += width
    return out


def summary(batch: Mapping[str, Any]) -> str:
    """The bar's words, for screen readers and for the eye: ``1 completed, 1,999 failed of 2,000``."""
    parts = [f"{count(seg.items)} {seg.name}" for seg in segments(batch)]
    return (", ".join(parts) or "no items") + f" of {count(batch.get('total_items') or 0)}"
