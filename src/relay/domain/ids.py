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
# An id is minted for every live request's usage event and every batch item's, so it is spelled in C
# where it can be. Its 16 random digits: 16 random bytes through one ``bytes.translate`` that keeps
# each byte's low 5 bits as a digit (256 is a multiple of 32, so every digit is uniform: 80 random
# bits, as before). Its 10 time digits change once a millisecond and are spelled once per millisecond.
_RANDOM_DIGITS = bytes(ord(_CROCKFORD[b & 31]) for b in range(256))


def _b32(v: int, digits: int) -> str:
    """``v`` as ``digits`` Crockford base-32 digits, most significant first."""
    return "".join(_CROCKFORD[(v >> shift) & 31] for shift in range(5 * (digits - 1), -1, -5))


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


_minted_in: tuple[int, str] = (-1, "")  # the last millisecond an id was minted in, and its 10 digits


def mint_id(prefix: str) -> str:
    """A ULID-like id: 48-bit millisecond time + 80 random bits, so ids sort by creation time; 26
    Crockford base-32 digits after the prefix (10 of time, the first 0–7; 16 random)."""
    global _minted_in
    millis = int(time.time() * 1000) & 0xFFFF_FFFF_FFFF
    minted_in = _minted_in  # read once: another thread may replace it meanwhile
    if minted_in[0] != millis:
        minted_in = _minted_in = (millis, _b32(millis, 10))
    return f"{prefix}_{minted_in[1]}{_ENTROPY.take(16).translate(_RANDOM_DIGITS).decode('ascii')}"


def is_valid_name(name: str) -> bool:
    return bool(NAME_RE.fullmatch(name))
