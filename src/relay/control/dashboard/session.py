"""Who is signed in to the dashboard, and the CSRF token of their session (SPEC §16 security).

Two kinds of sign-in share one cookie, ``relay_ui`` (``HttpOnly``, ``SameSite=Strict``, ``Secure``
when ``RELAY_PUBLIC_URL`` is https, ``Path=/ui``):

* the admin token: the cookie is ``a.<expiry>.<nonce>.<mac>``, an HMAC-SHA256 under a key derived
  from the admin token, so the token itself is never stored in the browser and changing
  ``RELAY_ADMIN_TOKEN`` signs every admin out;
* a user's email and password: the cookie is ``u.<session>``, the same opaque §3.2 session that
  ``POST /api/auth/login`` hands out (stored hashed, 12 h), checked against the database on each page;
* single sign-on (SPEC §21): ``u.<session>`` too, or ``o.<session>.<mac>`` for a member of an admin
  group: the MAC binds the admin view to that session, so it cannot be added to another cookie. The
  view ends with the session (sign-out, expiry, the user disabled); group changes apply at the next
  sign-in. These cookies are ``SameSite=Lax``: the callback that sets them arrives from the provider.

The CSRF token of a session is an HMAC of the cookie value: every state-changing form carries it in a
hidden field and the server compares in constant time. A page on another origin can neither read it
nor send the cookie (Strict), so either defence alone stops a cross-site POST.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from typing import Final

from relay.crypto.sealing import constant_time_equal

COOKIE: Final = "relay_ui"
ADMIN_TTL_S: Final = 12 * 3600


@dataclass(frozen=True)
class Viewer:
    """The signed-in party: the admin (every project) or a user (only their projects)."""

    kind: str  # "admin" | "user" (an SSO admin-group member is "admin" with user_id and email)
    cookie: str
    user_id: str | None = None
    email: str | None = None
    projects: tuple[tuple[str, str], ...] = field(default=())  # (id, name) for users

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"

    @property
    def scope(self) -> tuple[str, ...] | None:
        """Project ids this viewer may see; None for the admin (every project)."""
        return None if self.is_admin else tuple(pid for pid, _ in self.projects)

    @property
    def label(self) -> str:
        if self.is_admin:  # an SSO admin-group member is named by their email
            return f"{self.email} (admin)" if self.email else "admin"
        return str(self.email)


class Signer:
    def __init__(self, admin_token: str) -> None:
        self._key = hashlib.sha256(b"relay-dashboard-v1\0" + admin_token.encode()).digest()

    def _mac(self, message: str) -> str:
        return hmac.new(self._key, message.encode(), hashlib.sha256).hexdigest()

    def admin_cookie(self) -> str:
        body = f"a.{int(time.time()) + ADMIN_TTL_S}.{secrets.token_urlsafe(12)}"
        return f"{body}.{self._mac(body)}"

    def admin_cookie_valid(self, value: str) -> bool:
        body, _, mac = value.rpartition(".")
        parts = body.split(".")
        if len(parts) != 3 or parts[0] != "a" or not parts[1].isdigit():
            return False
        return constant_time_equal(mac, self._mac(body)) and int(parts[1]) > time.time()

    def oidc_admin_cookie(self, session: str) -> str:
        body = f"o.{session}"
        return f"{body}.{self._mac(body)}"

    def oidc_admin_session(self, value: str) -> str | None:
        """The session of a valid ``o.`` cookie, else None."""
        body, _, mac = value.rpartition(".")
        if not body.startswith("o.") or len(body) < 3 or not constant_time_equal(mac, self._mac(body)):
            return None
        return body[2:]

    def derive(self, purpose: str, value: str) -> str:
        """A secret only this Relay can compute from ``value`` (an SSO sign-in's nonce and PKCE
        verifier from its state: nothing to store between the start and the callback)."""
        return self._mac(purpose + "\0" + value)

    def csrf(self, cookie: str) -> str:
        return self._mac("csrf\0" + cookie)

    def csrf_ok(self, cookie: str, token: str | None) -> bool:
        return bool(token) and constant_time_equal(str(token), self.csrf(cookie))
