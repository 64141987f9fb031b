"""Numbers, times, prices and rules formatted for people (SPEC §16: "numbers and times are formatted
for people"), one function per kind of figure, each registered as a Jinja filter by ``web.Dashboard``.

Why one room: every page showed figures its own way (``%.4g`` printed ``6.252e+04``, a p50 of 0.4 ms
printed ``0.0``, prices ``0.8/4.0/None``, rules as raw JSON). Here each kind has exactly one rendering,
unit-tested at every magnitude the dashboard meets (10^-9 … 10^12).

What it deliberately does not know: HTML (the templates place the text; :func:`when` gives the
machine-readable instant that ``relay.js`` turns into the viewer's local time).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from jinja2 import Environment

DASH: Final = "–"
# Short scale, as people read dashboards: 12.3k, 4.5M, 6.7B, 8.9T.
_SUFFIXES: Final = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
_METERS: Final = {
    "requests": "requests",
    "tokens": "tokens",
    "input_tokens": "input tokens",
    "output_tokens": "output tokens",
    "concurrency": "concurrent requests",
}
_UNITS: Final = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week"}


def count(value: float | None) -> str:
    """An exact count with thousands separators: ``62520`` → ``62,520``."""
    if value is None:
        return DASH
    return f"{round(value):,}"


def compact(value: float | None) -> str:
    """A figure in at most four significant digits and no exponent: ``62520`` → ``62.5k``,
    ``1_234_567_890`` → ``1.23B``, ``0.000123`` → ``0.000123``, ``999`` → ``999``."""
    if value is None:
        return DASH
    magnitude = abs(value)
    for limit, suffix in _SUFFIXES:
        if magnitude >= limit * 0.9995:  # 999_600 is "1M", not "1000k"
            return (
                _trim(f"{value / limit:.3g}" if magnitude < limit * 999.5 else f"{value / limit:,.0f}")
                + suffix
            )
    if magnitude >= 1 or magnitude == 0:
        return _trim(f"{value:.3g}" if magnitude < 100 else f"{value:.0f}")
    return _plain(value, 3)


def usd(nanos: int | None) -> str:
    """A cost in nano-dollars as dollars: cents above a dollar, more digits below one cent."""
    if nanos is None:
        return DASH
    return money(nanos / 1e9)


def money(dollars: float | None) -> str:
    """Dollars: ``$1,234.50``; ``$0.0123``; ``$0.000015`` (never an exponent); ``$0`` for nothing."""
    if dollars is None:
        return DASH
    if dollars == 0:
        return "$0"
    magnitude = abs(dollars)
    sign = "-" if dollars < 0 else ""
    if magnitude >= 1:
        return f"{sign}${magnitude:,.2f}"
    return f"{sign}${_plain(magnitude, 3)}"


def latency(ms: float | None) -> str:
    """Milliseconds with the precision that still means something: ``0.42 ms``, ``12.5 ms``,
    ``340 ms``, ``1.25 s``; a sub-millisecond figure never collapses to ``0``."""
    if ms is None:
        return DASH
    if ms >= 1000:
        return f"{ms / 1000:,.2f} s"
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    if ms == 0:
        return "0 ms"
    return f"{ms:.2f} ms" if ms >= 0.01 else f"{_plain(ms, 2)} ms"


def pricing(prices: Mapping[str, Any] | None) -> str:
    """A binding's prices (USD per million tokens): ``in $0.80 · out $4.00 · cached $0.08 per 1M
    tokens``; a price left unset is said to be so, never ``None``."""
    if not prices:
        return "not priced"
    parts = []
    for key, label in (("input", "in"), ("output", "out"), ("cached_input", "cached")):
        value = prices.get(key)
        if value is not None:
            parts.append(f"{label} {_price(value)}")
    return (" · ".join(parts) + " per 1M tokens") if parts else "not priced"


def rule(spec: Mapping[str, Any]) -> str:
    """A rate-limit or budget rule as a sentence: ``1,000 requests per minute, per credential``;
    ``$25 per 30 days, per project``; ``8 concurrent requests``."""
    meter = str(spec.get("meter", ""))
    raw_limit = spec.get("limit")
    if meter == "cost_usd":
        amount = _price(raw_limit) if raw_limit is not None else DASH
    else:
        noun = _METERS.get(meter, meter.replace("_", " "))
        amount = f"{count(float(raw_limit)) if raw_limit is not None else DASH} {noun}"
    text = amount
    if meter != "concurrency" and spec.get("window"):
        text += f" per {window(str(spec['window']))}"
    per = spec.get("per") or "policy"
    return text + (f", per {per}" if per != "policy" else " (shared by the policy)")


def window(raw: str) -> str:
    """``1m`` → ``minute``, ``30d`` → ``30 days``, ``90s`` → ``90 seconds``."""
    number, unit = raw[:-1], raw[-1:]
    name = _UNITS.get(unit)
    if name is None or not number.isdigit():
        return raw
    n = int(number)
    return name if n == 1 else f"{n:,} {name}s"


def relative(moment: datetime | str | None, now: datetime | None = None) -> str:
    """How long ago (or until): ``just now``, ``42 s ago``, ``5 min ago``, ``3 h ago``, ``in 2 days``."""
    instant = _instant(moment)
    if instant is None:
        return DASH
    seconds = ((now or datetime.now(UTC)) - instant).total_seconds()
    ahead = seconds < 0
    seconds = abs(seconds)
    if seconds < 5:
        return "just now"
    if seconds < 60:
        span = f"{seconds:.0f} s"
    elif seconds < 3600:
        span = f"{seconds // 60:.0f} min"
    elif seconds < 86400 * 2:
        span = f"{seconds // 3600:.0f} h"
    else:
        span = f"{seconds // 86400:,.0f} days"
    return f"in {span}" if ahead else f"{span} ago"


def when(moment: datetime | str | None) -> str:
    """The instant in UTC to the second (``2026-12-06 06:55:10 UTC``): what a ``<time>`` element
    shows until ``relay.js`` rewrites its title in the viewer's own time zone."""
    instant = _instant(moment)
    return DASH if instant is None else instant.strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(moment: datetime | str | None) -> str:
    """RFC 3339 to the second, for ``<time datetime=…>``."""
    instant = _instant(moment)
    return "" if instant is None else instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def share(part: float, whole: float) -> str:
    """A share in percent, never rounding a nonzero share to 0 or a partial one to 100:
    1 of 2 000 → ``0.05%``, 1 999 of 2 000 → ``99.95%``."""
    if not whole:
        return DASH
    pct = 100 * part / whole
    if pct == 0 or pct == 100:
        return f"{pct:.0f}%"
    if pct < 1:
        return _plain(pct, 2) + "%"
    if pct > 99:
        return str(Decimal(100) - Decimal(_plain(100 - pct, 2))) + "%"
    return _trim(f"{pct:.1f}") + "%"


def _instant(moment: datetime | str | None) -> datetime | None:
    if moment is None or moment == "":
        return None
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _price(value: Any) -> str:
    amount = Decimal(str(value))
    if amount >= 1 or amount == 0:
        return f"${amount:,.2f}"
    return "$" + format(amount.normalize(), "f")


def _plain(value: float, significant: int) -> str:
    """A small number in plain digits with ``significant`` significant digits: 0.000123."""
    text = format(Decimal(f"{value:.{significant}g}"), "f")
    return _trim(text) if "." in text else text


def _trim(text: str) -> str:
    return text.rstrip("0").rstrip(".") if "." in text else text


def register(env: Environment) -> None:
    """Every formatter as a Jinja filter of the same name (``num`` and ``usd`` keep their old names)."""
    for name, function in (
        ("num", count),
        ("count", count),
        ("compact", compact),
        ("usd", usd),
        ("money", money),
        ("latency", latency),
        ("pricing", pricing),
        ("rule", rule),
        ("relative", relative),
        ("when", when),
        ("iso", iso),
    ):
        env.filters[name] = function
    env.globals["share"] = share
