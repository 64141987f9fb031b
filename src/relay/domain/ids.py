"""Identifiers and names.

Ids are minted by services, never by stores or callers: a short kind prefix, an underscore and a
time-ordered random part (``tm_01jd…``). The underscore can never appear in a name (names are slugs),
so a reference string is unambiguous: it is an id when it matches an id of that kind, else a name.
"""

from __future__ import annotations

import os
import re
import time

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
NAME_RE = re.compile(NAME_PATTERN)

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def _b32(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(out))


def mint_id(prefix: str) -> str:
    """A ULID-like id: 48-bit millisecond time + 80 random bits, so ids sort by creation time."""
    millis = int(time.time() * 1000)
    rand = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_b32(millis, 10)}{_b32(rand, 16)}"


def is_valid_name(name: str) -> bool:
    return bool(NAME_RE.match(name))
