"""Id minting: the format every stored id has, and the order ids sort in."""

from __future__ import annotations

import random
import re
import time
from collections import Counter
from typing import Any

from relay.domain import ids

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def reference_b32(value: int, length: int) -> str:
    """Crockford base 32, five bits at a time: the plain definition the fast encoder must match."""
    digits = []
    for _ in range(length):
        digits.append(CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(digits))


def test_the_time_digits_spell_every_bit_like_the_plain_definition() -> None:
    rng = random.Random(7)
    values = [0, 1, 2**48 - 1, 2**47, int(time.time() * 1000), *(rng.getrandbits(48) for _ in range(5000))]
    for value in values:
        assert ids._b32(value, 10) == reference_b32(value, 10), value


def test_each_random_digit_is_five_uniform_bits_of_one_random_byte(monkeypatch: Any) -> None:
    """Every digit is the spelling of 8 of the 256 byte values (its low 5 bits), so 16 random bytes
    give 16 uniform digits: 80 random bits, the id's random part."""
    table = ids._RANDOM_DIGITS
    assert sorted(Counter(table.decode()).items()) == sorted((digit, 8) for digit in CROCKFORD)
    taken = bytes(range(200, 216))
    monkeypatch.setattr(ids._ENTROPY, "take", lambda n: taken[:n])
    assert ids.mint_id("ue")[-16:] == "".join(CROCKFORD[b & 31] for b in taken)


def test_an_id_is_the_prefix_then_48_bits_of_milliseconds_and_80_random_bits() -> None:
    before = int(time.time() * 1000)
    minted = ids.mint_id("ue")
    after = int(time.time() * 1000)
    assert re.fullmatch(r"ue_[0-7][0-9a-hjkmnp-tv-z]{25}", minted), minted
    value = 0
    for c in minted[3:]:
        value = value * 32 + CROCKFORD.index(c)
    assert before <= value >> 80 <= after


def test_ids_minted_in_later_milliseconds_sort_later() -> None:
    first = ids.mint_id("ue")
    time.sleep(0.002)
    second = ids.mint_id("ue")
    assert first < second
    assert len({ids.mint_id("ue") for _ in range(1000)}) == 1000
