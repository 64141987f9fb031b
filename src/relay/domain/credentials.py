"""Relay keys and the shapes of credentials (SPEC §3.1, §3.3). No I/O beyond the OS random source.

A relay key is ``sk-relay-`` + base64url(32 random bytes) without padding (43 characters). Only its
sha256 (hex of the whole plaintext) and a 16-character display prefix are ever stored; the plaintext
exists once, in the response that creates or rotates the key.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KEY_PREFIX = "sk-relay-"
DISPLAY_PREFIX_LENGTH = 16


@dataclass(frozen=True)
class NewKey:
    plaintext: str
    key_hash: str
    prefix: str


def _builtin_sha256() -> Callable[[bytes], Any]:
    """CPython's own SHA-256, where the build has it. ``hashlib.sha256`` goes through OpenSSL 3, which
    fetches the algorithm (a provider lookup under locks) on every call: a key's hash cost 5–14 µs per
    request inside a busy ``relay serve`` (py-spy, ``bench/cpu_profile.py``), for 52 bytes
    (docs/benchmarks.md). The digest is the same; ``hashlib.sha256`` stays the fallback."""
    for module in ("_sha2", "_sha256"):  # 3.12+, 3.11
        try:
            return importlib.import_module(module).sha256  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    return hashlib.sha256


_sha256 = _builtin_sha256()


def hash_key(plaintext: str) -> str:
    return str(_sha256(plaintext.encode()).hexdigest())


def new_relay_key() -> NewKey:
    plaintext = KEY_PREFIX + base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    return NewKey(plaintext, hash_key(plaintext), plaintext[:DISPLAY_PREFIX_LENGTH])


def looks_like_jwt(credential: str) -> bool:
    """SPEC §3.3: a value that starts ``ey`` and has two dots is a token; anything else a relay key."""
    return credential.startswith("ey") and credential.count(".") == 2


MISSING_CREDENTIAL = "missing credential"


def missing_credential(authorization: str | None) -> str:
    """Why no credential was read (SPEC §3.3: ``missing credential``), with a hint when an
    ``Authorization`` header came without the ``Bearer`` scheme (a key pasted alone, ``Token …``):
    the usual mistake of a hand-written client. The header's value is never repeated."""
    if authorization is None or not authorization.strip():
        return MISSING_CREDENTIAL
    scheme = authorization.strip().partition(" ")[0]
    if scheme.lower() == "bearer":
        return f"{MISSING_CREDENTIAL}: the Authorization header says Bearer but carries no credential"
    return (
        f"{MISSING_CREDENTIAL}: the Authorization header must read 'Bearer <credential>' (it has no "
        "Bearer scheme); or send the key alone in x-api-key"
    )


def read_credential(authorization: str | None, x_api_key: str | None) -> str | None:
    """``Authorization: Bearer <credential>``, else ``x-api-key``; None when neither carries one."""
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    return None
