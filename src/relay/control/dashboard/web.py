"""What every dashboard page shares: its services, the templates, the security headers, the
signed-in viewer and what it may see, the CSRF check of state-changing forms, and how a page module's
route table is mounted (each handler takes the :class:`Dashboard` and the request).

Security headers on every answer: a Content-Security-Policy that allows scripts, styles, images and
fetches from Relay itself only (``'self'``: no inline script, no inline style, no CDN), no framing,
forms posting back to Relay only; ``no-store`` so a page that showed a plaintext key is not kept by
the browser; ``nosniff`` and ``no-referrer``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from relay.batch_apis.files_service import FileService
from relay.batches.service import BatchService
from relay.control.audit.context import ADMIN, Actor, act_as
from relay.control.audit.queries import AuditQueries
from relay.control.dashboard import formats, outcomes
from relay.control.dashboard.session import COOKIE, Signer, Viewer
from relay.control.kinds import PROJECT, TEAM
from relay.control.services.batches import BatchAdmin
from relay.control.services.catalog import CatalogService
from relay.control.services.health import HealthService
from relay.control.services.keys import KeyService
from relay.control.services.spend import SpendReader
from relay.control.services.sso_accounts import SsoAccounts
from relay.control.services.throttle import LoginThrottle
from relay.control.services.tokens import TokenService
from relay.control.services.usage import UsageQueries
from relay.control.services.webhooks import WebhookDeliveries
from relay.control.sso import OidcClient
from relay.errors import RelayError

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = {
    "content-security-policy": CSP,
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}
MAX_FORM_BYTES: Final = 16 * 1024


class Refused(Exception):
    """A dashboard-level refusal (not signed in, not allowed, bad CSRF): rendered as an error page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Dashboard:
    """The services the dashboard calls: the same objects the control API's routes call."""

    admin_token: str
    catalog: CatalogService
    keys: KeyService
    tokens: TokenService
    batches: BatchAdmin
    batch_service: BatchService
    usage: UsageQueries
    health: HealthService
    secure_cookies: bool = False
    # One throttle with POST /api/auth/login: a guess through either door counts against the same limit.
    login_throttle: LoginThrottle = field(default_factory=LoginThrottle)
    # A policy's budget spend, as GET /api/policies/{ref}/spend answers it (None: not shown).
    spend: SpendReader | None = None
    # A webhook's recent attempts, as GET /api/webhooks/{ref}/deliveries answers them (None: not shown).
    webhooks: WebhookDeliveries | None = None
    # The §14 output and error files, for an OpenAI batch's results link (None: no link).
    files: FileService | None = None
    # The audit log (SPEC §21), as GET /api/audit answers it (None: no audit page).
    audit: AuditQueries | None = None
    # Single sign-on (SPEC §21): the OIDC client and who its identities are (None: no SSO button).
    sso: OidcClient | None = None
    sso_accounts: SsoAccounts | None = None

    def __post_init__(self) -> None:
        self.signer = Signer(self.admin_token)
        self.env = Environment(
            loader=PackageLoader("relay.control.dashboard", "templates"),
            autoescape=select_autoescape(("html",)),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        formats.register(self.env)
        self.env.globals.update(
            outcome=outcomes.outcome,
            segments=outcomes.segments,
            bar_words=outcomes.summary,
            bar_width=outcomes.BAR_WIDTH,
        )
        self.env.filters["dollars"] = dollars
        self.env.globals["qs"] = query_string

    # -- who ----------------------------------------------------------------------------------------

    async def viewer(self, request: Request) -> Viewer | None:
        """Who is signed in; also the actor of the audit entries this request appends (SPEC §21)."""
        cookie = request.cookies.get(COOKIE, "")
        if cookie.startswith("a.") and self.signer.admin_cookie_valid(cookie):
            act_as(ADMIN)
            return Viewer("admin", cookie)
        sso_session = self.signer.oidc_admin_session(cookie) if cookie.startswith("o.") else None
        if sso_session is not None:
            found = await self.tokens.session_identity(sso_session)
            if found is not None:
                act_as(Actor("oidc", found["user_id"], found["email"]))
                return Viewer("admin", cookie, found["user_id"], found["email"])
        if cookie.startswith("u.") and len(cookie) > 2:
            found = await self.tokens.session_identity(cookie[2:])
            if found is not None:
                projects = tuple(tuple(p) for p in found["projects"])
                act_as(Actor("user", found["user_id"], found["email"]))
                return Viewer("user", cookie, found["user_id"], found["email"], projects)  # type: ignore[arg-type]
        return None

    async def require(self, request: Request, *, admin: bool = False) -> Viewer:
        viewer = await self.viewer(request)
        if viewer is None:
            raise Refused(401, "sign in first")
        if admin and not viewer.is_admin:
            raise Refused(403, "only the admin can see this page")
        return viewer

    async def form(
        self, request: Request, viewer: Viewer | None = None, pre: str | None = None
    ) -> dict[str, str]:
        """The posted form; refused without the CSRF token of the viewer's session (or, on the
        sign-in form, of the pre-session cookie)."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
            raise Refused(413, "form too large")
        chunks, size = [], 0
        async for chunk in request.stream():  # capped while reading: never buffer a huge body
            size += len(chunk)
            if size > MAX_FORM_BYTES:
                raise Refused(413, "form too large")
            chunks.append(chunk)
        raw = b"".join(chunks)
        fields = dict(parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True))
        basis = viewer.cookie if viewer is not None else pre
        if not basis or not self.signer.csrf_ok(basis, fields.get("csrf")):
            raise Refused(403, "the form's CSRF token is missing or wrong: reload the page and try again")
        return fields

    # -- answers ------------------------------------------------------------------------------------

    def page(
        self, name: str, request: Request, viewer: Viewer | None, status: int = 200, **context: Any
    ) -> HTMLResponse:
        csrf = self.signer.csrf(viewer.cookie) if viewer is not None else context.pop("csrf", "")
        html = self.env.get_template(name).render(
            request=request, viewer=viewer, csrf=csrf, path=request.url.path, **context
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def redirect(self, url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=303, headers=HEADERS)


def dollars(amount: float) -> str:
    """A JSON number of dollars (the spend API's) in plain digits: ``1.5e-05`` → ``$0.000015``."""
    return "$" + format(Decimal(str(amount)).normalize(), "f")


def query_string(params: dict[str, Any], **changes: Any) -> str:
    merged = {k: v for k, v in {**params, **changes}.items() if v not in (None, "")}
    return urlencode(merged)


Handler = Callable[[Request], Awaitable[Response]]
Page = Callable[[Dashboard, Request], Awaitable[Response]]
#: A page module's route table: (path, handler, methods), mounted in order by :func:`mount`.
PageRoutes = Sequence[tuple[str, Page, tuple[str, ...]]]


def mount(router: APIRouter, dash: Dashboard, routes: PageRoutes) -> None:
    """Add a page module's route table: each handler with ``dash`` and its errors rendered as pages."""
    for path, handler, methods in routes:
        router.add_api_route(path, with_errors(dash, handler), methods=list(methods), include_in_schema=False)


def with_errors(dash: Dashboard, handler: Page) -> Handler:
    """Render a :class:`Refused` or a service's 4xx (RelayError) as the error page with its status;
    a request that is not signed in goes to the sign-in page instead."""

    async def wrapped(request: Request) -> Response:
        try:
            return await handler(dash, request)
        except Refused as exc:
            if exc.status == 401 and request.method == "GET":
                return dash.redirect("/ui/signin")
            viewer = await dash.viewer(request)
            return dash.page("error.html", request, viewer, exc.status, message=exc.message)
        except RelayError as exc:
            viewer = await dash.viewer(request)
            return dash.page("error.html", request, viewer, exc.status, message=exc.message)

    # The route's name is the page's (the handler's ``dash`` is bound here, so FastAPI must read this
    # function's signature, not the handler's: no ``__wrapped__``).
    wrapped.__name__ = wrapped.__qualname__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


# -- what a viewer may see -----------------------------------------------------------------------------


def scoped_project(viewer: Viewer, params: dict[str, str]) -> dict[str, str]:
    """A user's reads are pinned to one of their projects (the one asked for, else their first)."""
    if viewer.is_admin:
        return params
    if not viewer.projects:
        raise Refused(403, "you are not a member of any project")
    wanted = params.get("project") or viewer.projects[0][0]
    for project_id, name in viewer.projects:
        if wanted in (project_id, name):
            return {**params, "project": project_id}
    raise Refused(403, f"you are not a member of project {wanted!r}")


async def project_names(dash: Dashboard, viewer: Viewer) -> dict[str, str]:
    """Project id → name for what the viewer may see (batches record ids; names read better)."""
    if not viewer.is_admin:
        return dict(viewer.projects)
    return {p["id"]: p["name"] for p in await dash.catalog.list_all(PROJECT)}


async def team_names(dash: Dashboard, viewer: Viewer) -> dict[str, str]:
    """Team id → name for the admin (a user's session knows its projects' names, not their teams')."""
    if not viewer.is_admin:
        return {}
    return {team["id"]: team["name"] for team in await dash.catalog.list_all(TEAM)}
