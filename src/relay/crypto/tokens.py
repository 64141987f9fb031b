"""Inference tokens (SPEC §3.2): Ed25519-signed JWTs minted by Relay and verified on the hot path.

``TokenSigner`` holds the private key (control plane: minting). ``TokenVerifier`` holds the public
keys from the catalog snapshot and checks signature, issuer and expiry; it caches verified claims by
the token's text until the token expires, so a busy client's token is verified cryptographically once.
What the claims *mean* now (user version, denylist, project state) is judged by ``auth`` against the
current snapshot on every request, so the cache can never outlive a revocation.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

ISSUER = "relay"
ALGORITHM = "EdDSA"
DEFAULT_TTL_S = 3600
MAX_TTL_S = 86400


@dataclass(frozen=True, slots=True)
class TokenClaims:
    user_id: str
    project_id: str
    version: int
    jti: str
    issued_at: int
    expires_at: int


class TokenInvalid(Exception):
    """Bad signature, issuer, shape or unknown signing key."""


class TokenExpired(Exception):
    pass


def generate_private_key() -> tuple[bytes, bytes]:
    """A new Ed25519 key pair as (raw private 32 bytes, raw public 32 bytes)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return private, public


class TokenSigner:
    def __init__(self, key_id: str, private_key: bytes) -> None:
        self._kid = key_id
        self._key = Ed25519PrivateKey.from_private_bytes(private_key)

    @property
    def key_id(self) -> str:
        return self._kid

    def mint(
        self, *, user_id: str, project_id: str, version: int, ttl_s: int, now: float | None = None
    ) -> tuple[str, TokenClaims]:
        issued = int(now if now is not None else time.time())
        claims = TokenClaims(user_id, project_id, version, uuid.uuid4().hex, issued, issued + ttl_s)
        payload = {
            "iss": ISSUER,
            "sub": f"user:{user_id}",
            "prj": project_id,
            "ver": version,
            "jti": claims.jti,
            "iat": claims.issued_at,
            "exp": claims.expires_at,
        }
        token = jwt.encode(payload, self._key, algorithm=ALGORITHM, headers={"kid": self._kid})
        return token, claims


def _is_int(value: Any) -> bool:
    return type(value) is int  # bool is an int subclass; JSON true is no timestamp


class TokenVerifier:
    def __init__(self, public_keys: Mapping[str, bytes], *, cache_size: int = 10_000) -> None:
        self._keys = {kid: Ed25519PublicKey.from_public_bytes(raw) for kid, raw in public_keys.items()}
        self._cache: OrderedDict[str, TokenClaims] = OrderedDict()
        self._cache_size = cache_size

    def verify(self, token: str, now: float | None = None) -> TokenClaims:
        current = time.time() if now is None else now
        cached = self._cache.get(token)
        if cached is not None:
            if cached.expires_at <= current:
                self._cache.pop(token, None)
                raise TokenExpired
            return cached
        claims = self._decode(token, current)
        self._cache[token] = claims
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return claims

    def _decode(self, token: str, now: float) -> TokenClaims:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenInvalid from None
        key = self._keys.get(str(header.get("kid")))
        if key is None or header.get("alg") != ALGORITHM:
            raise TokenInvalid
        try:
            payload: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                issuer=ISSUER,
                options={"require": ["iss", "sub", "prj", "ver", "jti", "iat", "exp"], "verify_exp": False},
            )
        except jwt.PyJWTError:
            raise TokenInvalid from None
        sub = str(payload["sub"])
        if not sub.startswith("user:") or not _is_int(payload["ver"]):
            raise TokenInvalid
        issued, expires = payload["iat"], payload["exp"]
        # SPEC §3.2: integer claims, and no lifetime over 24 h, whatever the signer put in (a token
        # signed by a leaked or older key must not live for ten years).
        if not _is_int(issued) or not _is_int(expires) or expires - issued > MAX_TTL_S or expires < issued:
            raise TokenInvalid
        if expires <= now:
            raise TokenExpired
        return TokenClaims(
            sub.removeprefix("user:"),
            str(payload["prj"]),
            int(payload["ver"]),
            str(payload["jti"]),
            int(payload["iat"]),
            int(payload["exp"]),
        )
