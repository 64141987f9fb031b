"""Token verification enforces the claim rules itself (SPEC §3.2), not only the mint."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from relay.crypto.tokens import TokenInvalid, TokenSigner, TokenVerifier, generate_private_key


@pytest.fixture
def keys() -> tuple[bytes, bytes]:
    return generate_private_key()


def forge(private: bytes, **claims: Any) -> str:
    now = int(time.time())
    payload = {
        "iss": "relay",
        "sub": "user:usr_1",
        "prj": "prj_1",
        "ver": 0,
        "jti": "j1",
        "iat": now,
        "exp": now + 600,
        **claims,
    }
    key = Ed25519PrivateKey.from_private_bytes(private)
    return jwt.encode(payload, key, algorithm="EdDSA", headers={"kid": "sig_1"})


def test_a_minted_token_verifies(keys: tuple[bytes, bytes]) -> None:
    token, claims = TokenSigner("sig_1", keys[0]).mint(user_id="u", project_id="p", version=3, ttl_s=86400)
    assert TokenVerifier({"sig_1": keys[1]}).verify(token) == claims


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": str(int(time.time()) + 600)},  # a string
        {"exp": time.time() + 600.5},  # a float
        {"iat": str(int(time.time()))},
        {"exp": True},
        {"exp": int(time.time()) + 10 * 365 * 86400},  # ten years: over 24 h after iat
        {"iat": int(time.time()) - 86400, "exp": int(time.time()) + 2},  # 24 h + 2 s
        {"iat": int(time.time()) + 600, "exp": int(time.time()) + 300},  # exp before iat
        {"ver": "0"},
    ],
)
def test_verification_refuses_bad_claims_even_when_signed(keys: tuple[bytes, bytes], claims: Any) -> None:
    with pytest.raises(TokenInvalid):
        TokenVerifier({"sig_1": keys[1]}).verify(forge(keys[0], **claims))
