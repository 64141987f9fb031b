"""Sealing upstream key values (AES-GCM bound to the row id) and embedded-mode secret files."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from relay.config import load_settings
from relay.crypto.sealing import SecretBox, provision


def test_seal_round_trips_and_is_bound_to_the_row() -> None:
    box = SecretBox(os.urandom(32))
    sealed = box.seal("sk-real-upstream", bound_to="hk_1")
    assert b"sk-real-upstream" not in sealed
    assert box.open(sealed, bound_to="hk_1") == "sk-real-upstream"
    with pytest.raises(ValueError):
        box.open(sealed, bound_to="hk_2")
    with pytest.raises(ValueError):
        SecretBox(os.urandom(32)).open(sealed, bound_to="hk_1")
    assert box.seal("x", bound_to="a") != box.seal("x", bound_to="a")  # fresh nonce each time


def test_embedded_mode_generates_secrets_once_with_mode_0600(tmp_path: Path) -> None:
    settings = load_settings({"RELAY_DATA_DIR": str(tmp_path / "relay-data")})
    first = provision(settings)
    assert len(first.generated) == 2
    for name in ("master.key", "admin.token"):
        mode = stat.S_IMODE((tmp_path / "relay-data" / name).stat().st_mode)
        assert mode == 0o600, (name, oct(mode))
    again = provision(settings)
    assert again.generated == ()
    assert (again.master_key, again.admin_token) == (first.master_key, first.admin_token)


def test_configured_secrets_win_and_postgres_needs_an_admin_token(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    settings = load_settings(
        {
            "RELAY_MASTER_KEY": key,
            "RELAY_ADMIN_TOKEN": "configured-token-123",
            "RELAY_DATA_DIR": str(tmp_path),
        }
    )
    got = provision(settings)
    assert got.master_key == base64.b64decode(key) and got.admin_token == "configured-token-123"
    assert got.generated == () and not (tmp_path / "master.key").exists()
    pg = load_settings({"RELAY_DATABASE_URL": "postgresql://u@h/db", "RELAY_MASTER_KEY": key})
    with pytest.raises(ValueError, match="RELAY_ADMIN_TOKEN"):
        provision(pg)
