"""Bar charts as plain geometry for inline SVG (no chart library, no script: the CSP allows none
inline, and a server-drawn chart weighs a few hundred bytes).

:func:`bars` turns ``[(label, value)]`` into rectangles in a fixed viewBox; the template draws them
with ``<rect>`` attributes only (no ``style`` attributes, which the CSP forbids) and gives each a
``<title>`` so the exact value is announced and shown on hover, and the page lists every value in a
table under the chart (readable without a mouse). :func:`per_minute` lays the usage summary's
per-minute rows onto the overview's "last hour" axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from relay.control.dashboard import formats

WIDTH = 600
HEIGHT = 140
GAP = 2


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: float


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    peak: float
    width: int = WIDTH
    height: int = HEIGHT
    horizontal: bool = False  # named groups, one row each (hbars); else bars over time
    unit: str = "count"  # "count" (12.3k) or "usd" (dollars): how values are written
    axis: str = "Time (UTC)"  # what the labels are, for the table of values

    @property
    def empty(self) -> bool:
        return not any(bar.value for bar in self.bars)

    @property
    def total(self) -> float:
        return sum(bar.value for bar in self.bars)

    def fmt(self, value: float) -> str:
        """A value as people read it: ``$0.0123`` for money, ``62.5k`` for counts (never ``6.252e+04``)."""
        return formats.money(value) if self.unit == "usd" else formats.compact(value)


def bars(
    title: str, points: Sequence[tuple[str, float]], unit: str = "count", axis: str = "Time (UTC)"
) -> Chart:
    peak = max((value for _, value in points), default=0) or 1
    slot = min(WIDTH / max(len(points), 1), 48)  # a few days are a few bars, not a wall
    out = []
    for i, (label, value) in enumerate(points):
        height = (HEIGHT - 4) * (value / peak)
        out.append(Bar(i * slot + GAP / 2, HEIGHT - height, max(slot - GAP, 1), height, label, value))
    return Chart(title, out, peak if any(v for _, v in points) else 0, unit=unit, axis=axis)


ROW = 22
LABEL_W = 200


def hbars(
    title: str, points: Sequence[tuple[str, float]], limit: int = 12, unit: str = "count", axis: str = "Group"
) -> Chart:
    """Horizontal bars for named groups (model, project, …): the biggest ``limit``, one row each,
    labels drawn as SVG text at the left."""
    top = sorted(points, key=lambda p: -p[1])[:limit]
    peak = max((value for _, value in top), default=0) or 1
    span = WIDTH - LABEL_W - 60
    out = [
        Bar(LABEL_W, i * ROW + 3, max(span * value / peak, 1 if value else 0), ROW - 6, label, value)
        for i, (label, value) in enumerate(top)
    ]
    return Chart(
        title,
        out,
        peak if any(v for _, v in top) else 0,
        height=max(len(top), 1) * ROW,
        horizontal=True,
        unit=unit,
        axis=axis,
    )


def per_minute(
    rows: Iterable[dict[str, Any]], now: datetime, minutes: int = 60
) -> dict[str, list[tuple[str, float]]]:
    """Requests, errors, tokens and cost (USD) per minute over the last ``minutes`` minutes, from the
    usage summary's rows grouped by ``minute`` (computed in the database over every event: SPEC §16
    "never from a sample"); a minute with no events is a zero bar."""
    start = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    stamps = [(start + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M") for i in range(minutes)]
    by_minute = {str(row["group"]): row for row in rows}
    series: dict[str, list[tuple[str, float]]] = {
        name: [] for name in ("requests", "errors", "tokens", "cost")
    }
    for stamp in stamps:
        row = by_minute.get(stamp, {})
        label = stamp[11:]
        series["requests"].append((label, float(row.get("requests") or 0)))
        series["errors"].append((label, float(row.get("errors") or 0)))
        tokens = (row.get("input_tokens") or 0) + (row.get("output_tokens") or 0)
        series["tokens"].append((label, float(tokens)))
        series["cost"].append((label, (row.get("cost_nanos") or 0) / 1e9))
    return series
