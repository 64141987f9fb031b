"""Bar charts as plain geometry for inline SVG (no chart library, no script: the CSP allows none
inline, and a server-drawn chart weighs a few hundred bytes).

:func:`bars` turns ``[(label, value)]`` into rectangles in a fixed viewBox; the template draws them
with ``<rect>`` attributes only (no ``style`` attributes, which the CSP forbids) and gives each a
``<title>`` so the exact value is announced and shown on hover. :func:`per_minute` buckets recent
usage events for the overview's "last hour" chart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

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

    @property
    def empty(self) -> bool:
        return not any(bar.value for bar in self.bars)


def bars(title: str, points: Sequence[tuple[str, float]]) -> Chart:
    peak = max((value for _, value in points), default=0) or 1
    slot = min(WIDTH / max(len(points), 1), 48)  # a few days are a few bars, not a wall
    out = []
    for i, (label, value) in enumerate(points):
        height = (HEIGHT - 4) * (value / peak)
        out.append(Bar(i * slot + GAP / 2, HEIGHT - height, max(slot - GAP, 1), height, label, value))
    return Chart(title, out, peak if any(v for _, v in points) else 0)


ROW = 22
LABEL_W = 200


def hbars(title: str, points: Sequence[tuple[str, float]], limit: int = 12) -> Chart:
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
        title, out, peak if any(v for _, v in top) else 0, height=max(len(top), 1) * ROW, horizontal=True
    )


def per_minute(
    events: Iterable[dict[str, Any]], now: datetime, minutes: int = 60
) -> dict[str, list[tuple[str, float]]]:
    """Requests, errors, tokens and cost (USD) per minute over the last ``minutes`` minutes."""
    start = now.astimezone(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes - 1)
    keys = [(start + timedelta(minutes=i)).strftime("%H:%M") for i in range(minutes)]
    series: dict[str, dict[str, float]] = {
        name: dict.fromkeys(keys, 0.0) for name in ("requests", "errors", "tokens", "cost")
    }
    for event in events:
        ts = datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")).astimezone(UTC)
        key = ts.strftime("%H:%M")
        if key not in series["requests"] or ts < start:
            continue
        series["requests"][key] += 1
        cancelled = event.get("error_kind") == "cancelled"  # a batch item its owner stopped: no error
        if not cancelled and (event.get("error_kind") or not 200 <= int(event.get("status") or 0) < 300):
            series["errors"][key] += 1
        series["tokens"][key] += int(event.get("input_tokens") or 0) + int(event.get("output_tokens") or 0)
        series["cost"][key] += (event.get("cost_nanos") or 0) / 1e9
    return {name: list(values.items()) for name, values in series.items()}
