"""Prices: what a call cost in integer nano-USD (SPEC §8), and the shipped price catalog.

What it does: turns a binding's ``pricing`` (USD per million tokens) into the exact cost of a call.
:func:`cost_nanos` is the reference (``Decimal`` arithmetic); :func:`nano_prices` precomputes a
binding's prices as integers once per snapshot so the hot path (budget commits) prices a call with
three integer multiplications and gets the same number, to the nano-USD.

What it does not know: bindings, usage events, budgets. No I/O except :mod:`relay.pricing.catalog`,
which reads the package's own data file.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal

from relay.adapters.base import Usage

_MILLION = Decimal(1_000_000)
_NANOS_PER_USD = Decimal(1_000_000_000)

#: A binding's prices in nano-USD per million tokens: (input, output, cached_input).
NanoPrices = tuple[int, int, int]


def _price(pricing: Mapping[str, object], key: str) -> Decimal | None:
    value = pricing.get(key)
    if value is None or isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    # str() first: Decimal(0.15) is 0.1499999999999999944488848768…, Decimal("0.15") is 0.15.
    return Decimal(str(value))


def _prices(pricing: Mapping[str, object] | None) -> tuple[Decimal, Decimal, Decimal] | None:
    """``(input, output, cached_input)`` in USD per million tokens (cached input at ``input`` when it
    is unset); None when unpriced: no pricing, or one without ``input`` or ``output`` (never guessed)."""
    if pricing is None:
        return None
    input_price = _price(pricing, "input")
    output_price = _price(pricing, "output")
    if input_price is None or output_price is None:
        return None
    cached_price = _price(pricing, "cached_input")
    return input_price, output_price, input_price if cached_price is None else cached_price


def cost_nanos(pricing: Mapping[str, object] | None, usage: Usage) -> int | None:
    """The price of ``usage`` in integer nano-USD, rounded half up; None when unpriced.

    Pricing is USD per million tokens, i.e. ``price × 1000`` nano-USD per token. Uncached input
    (``input_tokens - cached_input_tokens``) is charged at ``input``, cached input at ``cached_input``
    (or ``input`` when that is unset), output at ``output``. Decimal arithmetic: exact for any price
    written in decimal, so sums over millions of events do not drift. A pricing object without
    ``input`` or ``output`` is treated as unpriced rather than guessed.
    """
    prices = _prices(pricing)
    if prices is None:
        return None
    input_price, output_price, cached_price = prices
    cached = usage.cached_input_tokens
    uncached = max(0, usage.input_tokens - cached)
    usd_per_million = uncached * input_price + cached * cached_price + usage.output_tokens * output_price
    nanos = usd_per_million * _NANOS_PER_USD / _MILLION
    return int(nanos.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def nano_prices(pricing: Mapping[str, object] | None) -> NanoPrices | None:
    """``pricing`` as integer nano-USD per million tokens, or None when unpriced or when a price has
    more than 9 decimal places (then :func:`binding_cost` falls back to :func:`cost_nanos`)."""
    prices = _prices(pricing)
    if prices is None:
        return None
    out = []
    for price in prices:
        scaled = price * _NANOS_PER_USD
        if scaled != scaled.to_integral_value():
            return None
        out.append(int(scaled))
    return (out[0], out[1], out[2])


def cost_from_prices(prices: NanoPrices, usage: Usage) -> int:
    """:func:`cost_nanos` with precomputed integer prices (equal to it, to the nano-USD)."""
    cached = usage.cached_input_tokens
    uncached = max(0, usage.input_tokens - cached)
    total = uncached * prices[0] + cached * prices[2] + usage.output_tokens * prices[1]
    return (total + 500_000) // 1_000_000


def binding_cost(pricing: Mapping[str, object] | None, prices: NanoPrices | None, usage: Usage) -> int | None:
    """A binding's cost of ``usage``: from its integer ``prices`` (:func:`nano_prices`, worked out once
    per snapshot) when it has them, else :func:`cost_nanos` — the same number either way, paid once
    per request by the usage event and the budget commit alike."""
    if prices is not None:
        return cost_from_prices(prices, usage)
    return cost_nanos(pricing, usage)
