"""HTTP routes for relay keys, inference tokens and user sessions (SPEC §3, §11).

Thin: parse, call ``KeyService`` / ``TokenService``, render. Admin routes take the admin bearer;
``/api/auth/*`` take a user's session (cookie ``relay_session`` or ``Authorization: Bearer``).
"""

from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from relay.control.keys import KeyService
from relay.control.throttle import LoginThrottle
from relay.control.tokens import SESSION_TTL, TokenService
from relay.errors import Unauthenticated

SESSION_COOKIE = "relay_session"
JsonBody = Annotated[dict[str, Any], Body()]
OptionalJsonBody = Annotated[dict[str, Any] | None, Body()]


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
    admin = [Depends(require_admin)]
    login_throttle = throttle or LoginThrottle()

    @app.get("/api/keys", dependencies=admin, tags=["Key"])
    async def list_keys() -> dict[str, Any]:
        return {"items": await keys.list_all()}

    @app.post("/api/keys", dependencies=admin, tags=["Key"], status_code=201)
    async def create_key(payload: JsonBody) -> JSONResponse:
        """Create a relay key; the plaintext is in this response and nowhere else, ever."""
        return JSONResponse(await keys.create(payload), status_code=201)

    @app.get("/api/keys/{ref}", dependencies=admin, tags=["Key"])
    async def get_key(ref: str) -> dict[str, Any]:
        return await keys.get(ref)

    @app.patch("/api/keys/{ref}", dependencies=admin, tags=["Key"])
    async def patch_key(ref: str, payload: JsonBody) -> dict[str, Any]:
        """Change enabled, expires_at, policy, payload_logging or name."""
        return await keys.patch(ref, payload)

    @app.delete("/api/keys/{ref}", dependencies=admin, tags=["Key"], status_code=204)
    async def delete_key(ref: str) -> Response:
        await keys.delete(ref)
        return Response(status_code=204)

    @app.post("/api/keys/{ref}/rotate", dependencies=admin, tags=["Key"])
    async def rotate_key(ref: str, payload: OptionalJsonBody = None) -> dict[str, Any]:
        """New plaintext; the old one keeps working for ``grace_seconds`` (0–86400, default 0)."""
        return await keys.rotate(ref, payload)

    @app.post("/api/keys/{ref}/revoke", dependencies=admin, tags=["Key"])
    async def revoke_key(ref: str) -> dict[str, Any]:
        return await keys.revoke(ref)

    @app.post("/api/users/{ref}/tokens", dependencies=admin, tags=["Token"], status_code=201)
    async def mint_token(ref: str, payload: JsonBody) -> JSONResponse:
        """Mint an inference token for a user in one of its projects (ttl_seconds 1–86400, default 3600)."""
        return JSONResponse(await tokens.mint_for_user(ref, payload), status_code=201)

    @app.post("/api/users/{ref}/revoke-tokens", dependencies=admin, tags=["Token"])
    async def revoke_user_tokens(ref: str) -> dict[str, Any]:
        """Revoke every token the user holds (bumps its token_version)."""
        return await tokens.revoke_all(ref)

    @app.delete("/api/tokens/{jti}", dependencies=admin, tags=["Token"])
    async def revoke_token(jti: str) -> dict[str, Any]:
        """Deny one token until it expires."""
        return await tokens.revoke(jti)

    @app.post("/api/auth/login", tags=["Auth"])
    async def login(request: Request, payload: JsonBody) -> JSONResponse:
        """A user's session from email and password; also set as the ``relay_session`` cookie.
        Failed logins are throttled per email and per client address (429 with ``Retry-After``); each
        attempt is counted before the password is checked, so concurrent guesses cannot pass together."""
        email = str(payload.get("email", ""))[:320]
        address = request.client.host if request.client else "unknown"
        attempt = await login_throttle.attempt(email, address)  # counted before any password is hashed
        try:
            session = await tokens.login(payload)
        except Unauthenticated:
            raise  # a wrong guess: the attempt stays counted
        except Exception:
            await login_throttle.refund(attempt)
            raise
        await login_throttle.succeeded(attempt)
        response = JSONResponse({"session": session})
        response.set_cookie(
            SESSION_COOKIE,
            session,
            max_age=int(SESSION_TTL.total_seconds()),
            httponly=True,
            samesite="strict",
            secure=secure_cookies,
        )
        return response

    @app.post("/api/auth/token", tags=["Auth"], status_code=201)
    async def token_for_session(request: Request, payload: JsonBody) -> JSONResponse:
        """Mint an inference token for the logged-in user (session cookie or bearer)."""
        session = request.cookies.get(SESSION_COOKIE)
        if not session:
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            session = value.strip() if scheme.lower() == "bearer" else None
        return JSONResponse(await tokens.mint_for_session(session, payload), status_code=201)
