"""Identifiers and names.

Ids are minted by services, never by stores or callers: a short kind prefix, an underscore and a
time-ordered random part (``tm_01jd…``). The underscore can never appear in a name (names are slugs),
so a reference string is unambiguous: it is an id when it matches an id of that kind, else a name.
"""

from __future__ import annotations

import os
import re
import threading
import time

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
NAME_RE = re.compile(NAME_PATTERN)

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
# Every 10-bit value as its two Crockford digits. An id is minted for every live request's usage
# event, so its 128 bits are spelled with 13 table lookups instead of 26 shifts in a Python loop
# (≈ 1.5 µs instead of ≈ 4).
_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)


def _b32_128(v: int) -> str:
    """A 128-bit ``v`` as 26 Crockford base-32 digits, most significant first (the first is 0–7)."""
    p = _PAIRS
    return (
        p[v >> 120]
        + p[(v >> 110) & 1023]
        + p[(v >> 100) & 1023]
        + p[(v >> 90) & 1023]
        + p[(v >> 80) & 1023]
        + p[(v >> 70) & 1023]
        + p[(v >> 60) & 1023]
        + p[(v >> 50) & 1023]
        + p[(v >> 40) & 1023]
        + p[(v >> 30) & 1023]
        + p[(v >> 20) & 1023]
        + p[(v >> 10) & 1023]
        + p[v & 1023]
    )


class _Entropy:
    """``os.urandom`` read 4 KiB at a time: every usage event takes an id and a request id, and one
    ``getrandom`` call per id cost more than building the id (a syscall is dear on a busy or virtual
    machine). Ids need to be unique, not secret; the bytes are the kernel's all the same. A lock keeps
    two threads from taking the same bytes; a forked child starts with an empty pool, so it never
    repeats its parent's."""

    SIZE = 4096

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = b""
        self._at = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            at, end = self._at, self._at + n
            if end > len(self._pool):
                self._pool, at, end = os.urandom(max(n, self.SIZE)), 0, n
            self._at = end
            return self._pool[at:end]

    def forget(self) -> None:
        self._lock = threading.Lock()  # a lock held in the parent at the fork would stay held here
        self._pool, self._at = b"", 0


_ENTROPY = _Entropy()
os.register_at_fork(after_in_child=_ENTROPY.forget)


def random_hex(nbytes: int) -> str:
    """``nbytes`` random bytes in hex (``random_hex(16)`` is spelled like ``uuid4().hex``)."""
    return _ENTROPY.take(nbytes).hex()


def mint_id(prefix: str) -> str:
    """A ULID-like id: 48-bit millisecond time + 80 random bits, so ids sort by creation time."""
    millis = int(time.time() * 1000) & 0xFFFF_FFFF_FFFF
    rand = int.from_bytes(_ENTROPY.take(10), "big")
    return f"{prefix}_{_b32_128((millis << 80) | rand)}"


def is_valid_name(name: str) -> bool:
    return bool(NAME_RE.fullmatch(name))
