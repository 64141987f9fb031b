"""HTTP routes for relay keys, inference tokens and user sessions (SPEC §3, §11).

Thin: parse, call ``KeyService`` / ``TokenService``, render. Admin routes take the admin bearer;
``/api/auth/*`` take a user's session (cookie ``relay_session`` or ``Authorization: Bearer``).

What it deliberately does not know: how keys and tokens are minted, stored or checked (the services),
or how failed logins are counted (``LoginThrottle``: this module only tells it each attempt's outcome).
"""

from typing import Annotated, Any

from fastapi import Body, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from relay.control.routes.table import Route, mount
from relay.control.services.keys import KeyService
from relay.control.services.throttle import LoginThrottle
from relay.control.services.tokens import SESSION_TTL, TokenService
from relay.errors import Unauthenticated

SESSION_COOKIE = "relay_session"
JsonBody = Annotated[dict[str, Any], Body()]
OptionalJsonBody = Annotated[dict[str, Any] | None, Body()]


class KeyRoutes:
    def __init__(self, keys: KeyService) -> None:
        self._keys = keys

    async def list_keys(self) -> dict[str, Any]:
        return {"items": await self._keys.list_all()}

    async def create_key(self, payload: JsonBody) -> JSONResponse:
        """Create a relay key; the plaintext is in this response and nowhere else, ever."""
        return JSONResponse(await self._keys.create(payload), status_code=201)

    async def get_key(self, ref: str) -> dict[str, Any]:
        return await self._keys.get(ref)

    async def patch_key(self, ref: str, payload: JsonBody) -> dict[str, Any]:
        """Change enabled, expires_at, policy, payload_logging or name."""
        return await self._keys.patch(ref, payload)

    async def delete_key(self, ref: str) -> Response:
        await self._keys.delete(ref)
        return Response(status_code=204)

    async def rotate_key(self, ref: str, payload: OptionalJsonBody = None) -> dict[str, Any]:
        """New plaintext; the old one keeps working for ``grace_seconds`` (0–86400, default 0)."""
        return await self._keys.rotate(ref, payload)

    async def revoke_key(self, ref: str) -> dict[str, Any]:
        return await self._keys.revoke(ref)

    def table(self) -> list[Route]:
        one = "/api/keys/{ref}"
        return [
            Route("GET", "/api/keys", self.list_keys, "Key"),
            Route("POST", "/api/keys", self.create_key, "Key", status_code=201),
            Route("GET", one, self.get_key, "Key"),
            Route("PATCH", one, self.patch_key, "Key"),
            Route("DELETE", one, self.delete_key, "Key", status_code=204),
            Route("POST", one + "/rotate", self.rotate_key, "Key"),
            Route("POST", one + "/revoke", self.revoke_key, "Key"),
        ]


class TokenRoutes:
    """Inference tokens minted and revoked by the admin, and a user's own session and tokens."""

    def __init__(self, tokens: TokenService, throttle: LoginThrottle, *, secure_cookies: bool) -> None:
        self._tokens = tokens
        self._throttle = throttle
        self._secure_cookies = secure_cookies

    async def mint_token(self, ref: str, payload: JsonBody) -> JSONResponse:
        """Mint an inference token for a user in one of its projects (ttl_seconds 1–86400, default 3600)."""
        return JSONResponse(await self._tokens.mint_for_user(ref, payload), status_code=201)

    async def revoke_user_tokens(self, ref: str) -> dict[str, Any]:
        """Revoke every token the user holds (bumps its token_version)."""
        return await self._tokens.revoke_all(ref)

    async def revoke_token(self, jti: str) -> dict[str, Any]:
        """Deny one token until it expires."""
        return await self._tokens.revoke(jti)

    async def login(self, request: Request, payload: JsonBody) -> JSONResponse:
        """A user's session from email and password; also set as the ``relay_session`` cookie.
        Failed logins are throttled per email and per client address (429 with ``Retry-After``); each
        attempt is counted before the password is checked, so concurrent guesses cannot pass together."""
        email = str(payload.get("email", ""))[:320]
        address = request.client.host if request.client else "unknown"
        attempt = await self._throttle.attempt(email, address)  # counted before any password is hashed
        try:
            session = await self._tokens.login(payload)
        except Unauthenticated:
            raise  # a wrong guess: the attempt stays counted
        except Exception:
            await self._throttle.refund(attempt)
            raise
        await self._throttle.succeeded(attempt)
        response = JSONResponse({"session": session})
        response.set_cookie(
            SESSION_COOKIE,
            session,
            max_age=int(SESSION_TTL.total_seconds()),
            httponly=True,
            samesite="strict",
            secure=self._secure_cookies,
        )
        return response

    async def token_for_session(self, request: Request, payload: JsonBody) -> JSONResponse:
        """Mint an inference token for the logged-in user (session cookie or bearer)."""
        session = request.cookies.get(SESSION_COOKIE)
        if not session:
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            session = value.strip() if scheme.lower() == "bearer" else None
        return JSONResponse(await self._tokens.mint_for_session(session, payload), status_code=201)

    def table(self) -> list[Route]:
        return [
            Route("POST", "/api/users/{ref}/tokens", self.mint_token, "Token", status_code=201),
            Route("POST", "/api/users/{ref}/revoke-tokens", self.revoke_user_tokens, "Token"),
            Route("DELETE", "/api/tokens/{jti}", self.revoke_token, "Token"),
            Route("POST", "/api/auth/login", self.login, "Auth", admin=False),
            Route("POST", "/api/auth/token", self.token_for_session, "Auth", status_code=201, admin=False),
        ]


def mount_credential_routes(
    app: FastAPI,
    keys: KeyService,
    tokens: TokenService,
    require_admin: Any,
    *,
    secure_cookies: bool = False,
    throttle: LoginThrottle | None = None,
) -> None:
    """``secure_cookies``: the session cookie is ``Secure`` (``RELAY_PUBLIC_URL`` is https)."""
    token_routes = TokenRoutes(tokens, throttle or LoginThrottle(), secure_cookies=secure_cookies)
    mount(app, [*KeyRoutes(keys).table(), *token_routes.table()], require_admin)
