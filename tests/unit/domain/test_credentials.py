"""A relay key's stored hash is the sha256 hex of its whole plaintext (SPEC §3.1), whichever SHA-256
implementation ``hash_key`` runs on."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from relay.domain.credentials import KEY_PREFIX, hash_key, new_relay_key


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300))
def test_hash_key_is_the_sha256_hex_of_the_utf8_plaintext(plaintext: str) -> None:
    assert hash_key(plaintext) == hashlib.sha256(plaintext.encode()).hexdigest()


def test_a_new_key_carries_its_hash_and_prefix() -> None:
    key = new_relay_key()
    assert key.plaintext.startswith(KEY_PREFIX) and len(key.plaintext) == len(KEY_PREFIX) + 43
    assert key.key_hash == hashlib.sha256(key.plaintext.encode()).hexdigest()
    assert key.prefix == key.plaintext[:16]
