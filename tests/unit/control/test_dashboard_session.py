"""Dashboard sessions and CSRF tokens (relay.control.dashboard.session), and the cookie flags and
refusals of the dashboard's HTTP face, in process on SQLite (no browser needed for these)."""

from __future__ import annotations

import base64
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from relay.boot import build_runtime
from relay.config import Settings
from relay.control.dashboard.session import Signer

TOKEN = "dashboard-admin-token-0123456789"


def test_an_sso_admin_cookie_is_bound_to_its_session_and_cannot_be_forged() -> None:
    """SPEC §21: the admin view of an admin-group member rides on their session; the MAC stops a user
    from turning their own ``u.<session>`` into ``o.<session>.<mac>``, or moving the MAC to another."""
    signer = Signer(TOKEN)
    cookie = signer.oidc_admin_cookie("session-a")
    assert signer.oidc_admin_session(cookie) == "session-a"
    body, _, mac = cookie.rpartition(".")
    assert signer.oidc_admin_session("o.session-b." + mac) is None  # the MAC of another session
    assert signer.oidc_admin_session(f"{body}.{'0' * len(mac)}") is None  # forged
    assert signer.oidc_admin_session("o.session-a") is None  # no MAC at all
    assert Signer("another-admin-token-0123456789").oidc_admin_session(cookie) is None
    # The SSO nonce and PKCE verifier derive from the state under the same key, one per purpose.
    nonce, verifier = signer.derive("oidc-nonce", "st"), signer.derive("oidc-pkce", "st")
    assert nonce != verifier and nonce == Signer(TOKEN).derive("oidc-nonce", "st")
    assert 43 <= len(verifier) <= 128  # RFC 7636's length for a code verifier


def test_admin_cookie_is_signed_expires_and_follows_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    signer = Signer(TOKEN)
    cookie = signer.admin_cookie()
    assert TOKEN not in cookie and signer.admin_cookie_valid(cookie)
    body, _, mac = cookie.rpartition(".")
    assert not signer.admin_cookie_valid(f"{body}.{'0' * len(mac)}")  # forged MAC
    prefix, expiry, nonce = body.split(".")
    assert not signer.admin_cookie_valid(f"{prefix}.{int(expiry) + 99}.{nonce}.{mac}")  # extended
    assert not Signer(TOKEN + "-rotated").admin_cookie_valid(cookie)  # a new admin token signs out
    assert not signer.admin_cookie_valid("u.something") and not signer.admin_cookie_valid("a.1.2")
    monkeypatch.setattr(time, "time", lambda: int(expiry) + 1)
    assert not signer.admin_cookie_valid(cookie)  # expired


def test_csrf_token_belongs_to_one_session() -> None:
    signer = Signer(TOKEN)
    a, b = signer.admin_cookie(), signer.admin_cookie()
    assert signer.csrf_ok(a, signer.csrf(a))
    assert not signer.csrf_ok(a, signer.csrf(b)) and not signer.csrf_ok(a, None) and not signer.csrf_ok(a, "")


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'relay.db'}",
        data_dir=str(tmp_path / "data"),
        admin_token=TOKEN,
        master_key=base64.b64encode(bytes(range(32))).decode(),
        public_url="https://relay.example.com",
        batch_workers=0,
    )
    runtime = build_runtime(settings)
    await runtime.start()
    try:
        transport = httpx.ASGITransport(app=runtime.control_app)
        async with httpx.AsyncClient(transport=transport, base_url="https://relay.example.com") as client:
            yield client
    finally:
        await runtime.stop()


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


async def test_secure_cookie_behind_https_and_refusals(control: httpx.AsyncClient) -> None:
    page = await control.get("/ui/signin")
    assert page.status_code == 200
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "style-src 'self'" in csp
    assert page.headers["cache-control"] == "no-store"
    # No CSRF token: refused, no session.
    refused = await control.post("/ui/signin", data={"admin_token": TOKEN})
    assert refused.status_code == 403 and "relay_ui=" not in refused.headers.get("set-cookie", "")
    signed = await control.post("/ui/signin", data={"admin_token": TOKEN, "csrf": csrf_of(page.text)})
    assert signed.status_code == 303
    cookie: Any = signed.headers["set-cookie"]
    assert "relay_ui=" in cookie and "HttpOnly" in cookie and "Secure" in cookie
    assert "SameSite=strict" in cookie and "Path=/ui" in cookie
    keys = await control.get("/ui/keys")
    assert keys.status_code == 200 and "Create a key" in keys.text
    oversized = await control.post("/ui/keys", content=b"x" * 20_000)
    assert oversized.status_code == 413
    no_csrf = await control.post("/ui/keys", data={"principal_kind": "user", "principal": "x"})
    assert no_csrf.status_code == 403
    bad = await control.get("/ui/batches?state=running")
    assert bad.status_code == 400 and "state" in bad.text  # the admin batch API's own refusal
    assert (await control.get("/ui/static/relay.js")).headers["content-type"].startswith("text/javascript")
    assert (await control.get("/ui/static/../boot.py")).status_code == 404
