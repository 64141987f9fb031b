"""Secrets at rest and the embedded-mode secret files.

``SecretBox`` seals upstream key values (and, later, the token signing key) with AES-256-GCM under
``RELAY_MASTER_KEY``. Each ciphertext is bound to the id of the row that holds it (associated data), so
a sealed value copied into another row does not open. Layout: version byte, 12-byte nonce, ciphertext.

Embedded mode (SQLite) may run with no master key or admin token configured: they are generated once
into ``relay-data/`` with mode 0600 and read back on later boots. With Postgres the master key must be
configured (``config`` enforces it) because replicas must share it.
"""

from __future__ import annotations

import base64
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from relay.config import Settings

_VERSION = b"\x01"


class SecretBox:
    def __init__(self, master_key: bytes) -> None:
        if len(master_key) != 32:
            raise ValueError("master key must be 32 bytes")
        self._aead = AESGCM(master_key)

    def seal(self, plaintext: str, *, bound_to: str) -> bytes:
        nonce = os.urandom(12)
        return _VERSION + nonce + self._aead.encrypt(nonce, plaintext.encode(), bound_to.encode())

    def open(self, sealed: bytes, *, bound_to: str) -> str:
        if not sealed or sealed[:1] != _VERSION:
            raise ValueError("unknown sealed-value format")
        try:
            return self._aead.decrypt(sealed[1:13], sealed[13:], bound_to.encode()).decode()
        except InvalidTag:
            raise ValueError("sealed value does not open with this master key") from None


@dataclass(frozen=True)
class ProvisionedSecrets:
    master_key: bytes
    admin_token: str
    generated: tuple[str, ...]  # human-readable notes of what was generated this boot
    admin_token_path: Path | None  # where the generated admin token lives (embedded mode)


def provision(settings: Settings) -> ProvisionedSecrets:
    """Master key and admin token: from settings, else (embedded mode) from/into ``relay-data/``."""
    data_dir = Path(settings.data_dir)
    notes: list[str] = []
    if settings.master_key is not None:
        master = base64.b64decode(settings.master_key.get_secret_value())
    else:
        path = data_dir / "master.key"
        if not path.exists():
            _write_secret(path, base64.b64encode(os.urandom(32)).decode())
            notes.append(f"generated a master key into {path} (keep it: it decrypts stored upstream keys)")
        master = base64.b64decode(path.read_text().strip())
    token_path: Path | None = None
    if settings.admin_token is not None:
        token = settings.admin_token.get_secret_value()
    elif settings.is_postgres:
        raise ValueError("RELAY_ADMIN_TOKEN: required when RELAY_DATABASE_URL is Postgres")
    else:
        token_path = data_dir / "admin.token"
        if not token_path.exists():
            token = "relay-admin-" + secrets.token_urlsafe(32)
            _write_secret(token_path, token)
            # The note names the file, never the token: it goes to the log (SPEC §1, §12).
            notes.append(f"generated an admin token into {token_path} (mode 0600; read it from there)")
        token = token_path.read_text().strip()
    return ProvisionedSecrets(master, token, tuple(notes), token_path)


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())
