"""Signing in and out of the dashboard (SPEC §16): with the admin token, or as a user with email and
password (a user session, as ``POST /api/auth/login`` gives one).

Guesses are throttled as on ``POST /api/auth/login``, by the same :class:`LoginThrottle` with the same
counts, each counted before anything is compared: per email and per client address; admin-token
guesses per address only (under one shared name anyone could lock the operator out of every replica).
The sign-in form's CSRF token is bound to a pre-session cookie, since no session exists yet.

What it deliberately does not know: how sessions are minted or checked (``TokenService``, ``Signer``).
"""

from __future__ import annotations

import secrets
from typing import Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.audit.context import ADMIN
from relay.control.dashboard.session import ADMIN_TTL_S, COOKIE
from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.crypto.sealing import constant_time_equal
from relay.errors import RelayError

PRE_COOKIE = "relay_ui_pre"  # the sign-in form's CSRF basis, before any session exists
USER_TTL_S: Final = 12 * 3600


def set_cookie(dash: Dashboard, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=dash.secure_cookies,
    )


async def signin_page(
    dash: Dashboard, request: Request, status: int = 200, message: str | None = None
) -> Response:
    pre = request.cookies.get(PRE_COOKIE) or secrets.token_urlsafe(16)
    response = dash.page(
        "signin.html",
        request,
        None,
        status,
        csrf=dash.signer.csrf(pre),
        message=message,
        sso=dash.sso is not None,
    )
    set_cookie(dash, response, PRE_COOKIE, pre, 3600)
    return response


async def signin(dash: Dashboard, request: Request) -> Response:
    if request.method == "GET":
        if await dash.viewer(request) is not None:
            return dash.redirect("/ui/")
        return await signin_page(dash, request)
    try:
        fields = await dash.form(request, pre=request.cookies.get(PRE_COOKIE))
    except Refused as exc:
        return await signin_page(dash, request, exc.status, exc.message)
    address = request.client.host if request.client else "unknown"
    admin_token = fields.get("admin_token", "")
    email = None if admin_token else fields.get("email", "")[:320]
    try:
        attempt = await dash.login_throttle.attempt(email, address)
    except RelayError as exc:
        return await signin_page(dash, request, exc.status, exc.message)
    if admin_token:
        if not constant_time_equal(admin_token.strip(), dash.admin_token):
            await dash.catalog.audit.sign_in_failed(
                "admin_token", via="admin_token", reason="invalid admin token"
            )
            return await signin_page(dash, request, 401, "invalid admin token")  # stays counted
        value, max_age = dash.signer.admin_cookie(), ADMIN_TTL_S
        await dash.catalog.audit.record_alone("sign_in", "Session", "admin_token", actor=ADMIN)
    else:
        try:
            session = await dash.tokens.login({"email": email, "password": fields.get("password", "")})
        except RelayError as exc:
            if exc.status != 401:  # not a wrong guess
                await dash.login_throttle.refund(attempt)
            return await signin_page(dash, request, exc.status, exc.message)
        except Exception:
            await dash.login_throttle.refund(attempt)
            raise
        value, max_age = "u." + session, USER_TTL_S
    await dash.login_throttle.succeeded(attempt)
    response = dash.redirect("/ui/")
    set_cookie(dash, response, COOKIE, value, max_age)
    response.delete_cookie(PRE_COOKIE, path="/ui")
    return response


async def signout(dash: Dashboard, request: Request) -> Response:
    viewer = await dash.require(request)
    await dash.form(request, viewer)
    session = dash.signer.oidc_admin_session(viewer.cookie) if viewer.user_id else None
    if session is not None:
        await dash.tokens.end_session(session)
    elif not viewer.is_admin:
        await dash.tokens.end_session(viewer.cookie[2:])
    response = dash.redirect("/ui/signin")
    response.delete_cookie(COOKIE, path="/ui")
    return response


ROUTES: Final[PageRoutes] = [
    ("/ui/signin", signin, ("GET", "POST")),
    ("/ui/signout", signout, ("POST",)),
]
