"""Rate-limit rules as stored on a policy (SPEC §5): what is counted, how much, over which window,
and whether the count is shared by the whole policy or kept per credential, project or team.

Spend limits (budgets) are rules too: meter ``cost_usd`` with ``limit`` a decimal number of US dollars.
The limit is parsed exactly (``Decimal`` from the written digits, never float arithmetic) and used as an
integer number of nano-USD (:attr:`RateLimitRule.limit_nanos`), the unit usage events are priced in
(SPEC §8). It is rendered back as a JSON number (an int when whole): JSON has no decimal type, and the
digits read back are the digits written.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
)

Meter = Literal["requests", "tokens", "input_tokens", "output_tokens", "concurrency", "cost_usd"]
Per = Literal["policy", "credential", "project", "team"]
_WINDOW = re.compile(r"^(?:(1)([smhdw])|(30)(d)|([1-9][0-9]{0,6})s)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
NANOS_PER_USD = 1_000_000_000
#: The largest spend limit: counters are compared inside Redis Lua, whose numbers are doubles, exact
#: for integers up to 2**53 nano-USD (about 9 million USD).
MAX_LIMIT_NANOS = 2**53
MAX_LIMIT_USD = Decimal(MAX_LIMIT_NANOS) / NANOS_PER_USD


def window_seconds(window: str) -> int:
    """``1s``/``1m``/``1h``/``1d``/``1w``/``30d`` or ``<n>s`` as seconds; ValueError otherwise."""
    match = _WINDOW.fullmatch(window)
    if not match:
        raise ValueError(f"window {window!r} must be 1s, 1m, 1h, 1d, 1w, 30d or <n>s")
    if match.group(5):
        return int(match.group(5))
    if match.group(3):
        return 30 * 86400
    return _UNIT_SECONDS[match.group(2)]


def parse_usd(value: object) -> Decimal:
    """A dollar amount as written (int, JSON number or decimal string) → exact ``Decimal``.

    A float is read through its shortest repr, which gives back the digits the JSON document had
    (``0.1`` → ``Decimal("0.1")``), not its binary approximation."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError("must be a decimal number of US dollars, e.g. 25 or 12.50")
    try:
        amount = Decimal(repr(value)) if isinstance(value, float) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal number of US dollars") from None
    if not amount.is_finite():
        raise ValueError(f"{value!r} is not a decimal number of US dollars")
    return amount


def usd_to_nanos(amount: Decimal) -> int:
    nanos = amount * NANOS_PER_USD
    if nanos != nanos.to_integral_value():
        raise ValueError("must have at most 9 decimal places (1 nano-USD)")
    return int(nanos)


class RateLimitRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    meter: Meter
    limit: int | Decimal
    window: str = "1m"
    per: Per = "policy"

    @field_validator("limit", mode="before")
    @classmethod
    def _limit(cls, value: object, info: ValidationInfo) -> int | Decimal:
        if info.data.get("meter") == "cost_usd":
            amount = parse_usd(value)
            if amount < 0:
                raise ValueError("a spend limit must be >= 0 US dollars")
            if amount > MAX_LIMIT_USD:
                raise ValueError(f"a spend limit must be at most {MAX_LIMIT_USD} US dollars")
            usd_to_nanos(amount)
            return amount
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("must be a whole number >= 1")
        return value

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        window_seconds(value)
        return value

    @field_serializer("limit")
    def _render_limit(self, value: int | Decimal) -> int | float:
        if isinstance(value, Decimal):
            return int(value) if value == value.to_integral_value() else float(value)
        return value

    @property
    def limit_nanos(self) -> int:
        """A ``cost_usd`` limit in nano-USD (exact); other meters' limits as they are."""
        if isinstance(self.limit, Decimal):
            return usd_to_nanos(self.limit)
        return self.limit


class RateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[RateLimitRule] = Field(default_factory=list)
