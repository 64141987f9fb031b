"""Rate-limit rules as stored on a policy (SPEC §5): what is counted, how much, over which window,
and whether the count is shared by the whole policy or kept per credential."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Meter = Literal["requests", "tokens", "input_tokens", "output_tokens", "concurrency"]
_WINDOW = re.compile(r"^(?:(1)([smhd])|([1-9][0-9]{0,6})s)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def window_seconds(window: str) -> int:
    """``1s``/``1m``/``1h``/``1d`` or ``<n>s`` as a number of seconds; ValueError otherwise."""
    match = _WINDOW.match(window)
    if not match:
        raise ValueError(f"window {window!r} must be 1s, 1m, 1h, 1d or <n>s")
    if match.group(3):
        return int(match.group(3))
    return _UNIT_SECONDS[match.group(2)]


class RateLimitRule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    meter: Meter
    limit: int = Field(ge=1)
    window: str = "1m"
    per: Literal["policy", "credential"] = "policy"

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        window_seconds(value)
        return value


class RateLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[RateLimitRule] = Field(default_factory=list)
