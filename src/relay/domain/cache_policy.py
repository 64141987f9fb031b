"""A policy's ``cache`` block (SPEC §19): whether and how long answers to the policy's requests are
kept, and who may be served one.

Why a value of its own. The block is validated once when the catalog is written (a bad TTL or scope
is refused naming ``cache.<field>``), and the hot path only reads ``ttl_s``, ``scope`` and ``streams``
from the snapshot, never parses a duration per request.

What it deliberately does not know: keys, stores, Redis. Absent (``None`` on the policy) means off.

Invariants: ``1 ≤ ttl_s ≤ 30 days``; ``ttl`` is kept as written (an export gives back what was applied).
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, StrictBool, StrictStr, field_validator

CacheScope = Literal["project", "policy", "credential"]

#: The longest a cached answer may be kept (SPEC §19: at most 30 days).
MAX_TTL_S = 30 * 86_400
_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
_TTL = re.compile(r"([1-9][0-9]{0,9})([smhd])")


def ttl_seconds(ttl: str) -> int:
    """``"<n>s|m|h|d"`` in seconds; ``ValueError`` for any other form or past 30 days."""
    match = _TTL.fullmatch(ttl)
    if match is None:
        raise ValueError("must be a whole number followed by s, m, h or d, e.g. 300s, 10m, 1h, 7d")
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_TTL_S:
        raise ValueError("at most 30d")
    return seconds


class CachePolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl: StrictStr
    scope: CacheScope = "project"
    streams: StrictBool = True

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, value: str) -> str:
        ttl_seconds(value)
        return value

    @cached_property
    def ttl_s(self) -> int:
        return ttl_seconds(self.ttl)
