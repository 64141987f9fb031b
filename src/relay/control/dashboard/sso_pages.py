"""Single sign-on pages (SPEC §21): ``GET /ui/sso/start`` sends the browser to the identity provider,
``GET /ui/sso/callback`` brings it back signed in, or on a page naming why not.

The sign-in in flight lives in one cookie, ``relay_sso`` (``HttpOnly``, ``SameSite=Lax`` so the
provider's redirect carries it, ``Path=/ui/sso``, ten minutes): ``<state>.<expiry>.<mac>``. The
``nonce`` and the PKCE verifier are MACs of the state under the dashboard's key, so nothing is stored
between the two requests and any replica can finish a sign-in another one started; the browser that
did not start it has no cookie, and a state other than the cookie's is refused. The cookie is spent
by the callback, whatever its outcome.

Refusals answer 400 (state, code, ID token), 403 (email not verified, user disabled) or 502 (provider
unreachable) with an HTML page, set no session, and append a failed sign-in entry naming the email
when one is known. No token, code or secret is shown or logged.
"""

from __future__ import annotations

import secrets
import time
from typing import Final

from fastapi import Request
from fastapi.responses import Response

from relay.control.dashboard.session import COOKIE
from relay.control.dashboard.signin_pages import USER_TTL_S
from relay.control.dashboard.web import Dashboard, PageRoutes, Refused
from relay.control.sso import OidcClient, SsoError
from relay.crypto.sealing import constant_time_equal
from relay.errors import RelayError
from relay.oidc_settings import groups_of

FLOW_COOKIE: Final = "relay_sso"
FLOW_TTL_S: Final = 600
API_SESSION_COOKIE: Final = "relay_session"  # the §3.2 session cookie of /api/auth/*


def _client(dash: Dashboard) -> OidcClient:
    if dash.sso is None or dash.sso_accounts is None:
        raise Refused(404, "single sign-on is not configured")
    return dash.sso


def redirect_uri(client: OidcClient, request: Request) -> str:
    """``RELAY_OIDC_REDIRECT_URL``, else this request's scheme and Host + ``/ui/sso/callback``."""
    if client.settings.redirect_url:
        return client.settings.redirect_url
    host = request.headers.get("host") or f"{request.url.hostname}:{request.url.port}"
    return f"{request.url.scheme}://{host}/ui/sso/callback"


async def start(dash: Dashboard, request: Request) -> Response:
    client = _client(dash)
    state = secrets.token_urlsafe(24)
    try:
        url = await client.authorization_url(
            redirect_uri(client, request),
            state,
            dash.signer.derive("oidc-nonce", state),
            dash.signer.derive("oidc-pkce", state),
        )
    except SsoError as exc:
        return refusal(dash, request, exc)
    body = f"{state}.{int(time.time()) + FLOW_TTL_S}"
    response = dash.redirect(url)
    response.set_cookie(
        FLOW_COOKIE,
        f"{body}.{dash.signer.derive('oidc-flow', body)}",
        max_age=FLOW_TTL_S,
        path="/ui/sso",
        httponly=True,
        samesite="lax",
        secure=dash.secure_cookies,
    )
    return response


def _flow_state(dash: Dashboard, request: Request) -> str:
    value = request.cookies.get(FLOW_COOKIE, "")
    body, _, mac = value.rpartition(".")
    state, _, expiry = body.partition(".")
    if (
        not state
        or not expiry.isdigit()
        or not constant_time_equal(mac, dash.signer.derive("oidc-flow", body))
    ):
        raise SsoError(400, "no sign-in in progress in this browser: start again from the sign-in page")
    if int(expiry) < time.time():
        raise SsoError(400, "the sign-in took too long: start again from the sign-in page")
    return state


async def callback(dash: Dashboard, request: Request) -> Response:
    client = _client(dash)
    assert dash.sso_accounts is not None
    params = request.query_params
    email = ""
    try:
        state = _flow_state(dash, request)
        if not constant_time_equal(params.get("state", ""), state):
            raise SsoError(400, "the sign-in's state does not match this browser's: start again")
        if params.get("iss") and params["iss"].rstrip("/") != client.settings.issuer:  # RFC 9207 mix-up
            raise SsoError(400, "the answer comes from another identity provider (iss)")
        if params.get("error"):
            raise SsoError(400, f"the identity provider refused the sign-in ({params['error'][:64]})")
        code = params.get("code", "")
        if not code:
            raise SsoError(400, "the identity provider sent no code")
        id_token = await client.redeem(
            code, redirect_uri(client, request), dash.signer.derive("oidc-pkce", state)
        )
        claims = await client.verify(id_token, dash.signer.derive("oidc-nonce", state))
        email = str(claims.get("email") or "")[:320]
        if not email or "@" not in email:
            raise SsoError(400, "the ID token carries no email (add the email scope)")
        if claims.get("email_verified") is not True:
            raise SsoError(403, "this account's email address is not verified by the identity provider")
        groups = groups_of(claims, client.settings.groups_claim)
        signed_in = await dash.sso_accounts.sign_in(email, groups, client.settings.project_groups)
    except SsoError as exc:
        await dash.catalog.audit.sign_in_failed(email or "unknown", via="oidc", reason=exc.reason)
        return refusal(dash, request, exc)
    except RelayError as exc:  # a disabled user (403) is audited by the service; anything else here
        if exc.status != 403:
            await dash.catalog.audit.sign_in_failed(email or "unknown", via="oidc", reason=exc.message)
        return refusal(dash, request, SsoError(exc.status, exc.message))
    admin = bool(set(groups) & set(client.settings.admin_groups))
    value = dash.signer.oidc_admin_cookie(signed_in.session) if admin else "u." + signed_in.session
    response = dash.redirect("/ui/")
    secure = dash.secure_cookies
    response.set_cookie(
        COOKIE, value, max_age=USER_TTL_S, path="/ui", httponly=True, samesite="lax", secure=secure
    )
    response.set_cookie(
        API_SESSION_COOKIE,
        signed_in.session,
        max_age=USER_TTL_S,
        httponly=True,
        samesite="lax",
        secure=secure,
    )
    response.delete_cookie(FLOW_COOKIE, path="/ui/sso")
    return response


def refusal(dash: Dashboard, request: Request, exc: SsoError) -> Response:
    response = dash.page(
        "error.html", request, None, exc.status, message=f"Single sign-on failed: {exc.reason}"
    )
    response.delete_cookie(FLOW_COOKIE, path="/ui/sso")
    return response


ROUTES: Final[PageRoutes] = [
    ("/ui/sso/start", start, ("GET",)),
    ("/ui/sso/callback", callback, ("GET",)),
]
