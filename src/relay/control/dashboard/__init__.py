"""The web dashboard at ``/ui/`` on the control port (SPEC §16).

Stack, and why: server-rendered Jinja2 templates, one small stylesheet and one small vanilla
JavaScript module (live updates by polling HTML fragments), charts drawn as inline SVG on the server.
Everything is package data served by Relay itself (no CDN, works offline), no build step (``make demo``
and ``make test`` need only Python and PyPI), a page weighs a few KB, and the Content-Security-Policy
can forbid every inline script and style.

It renders what the control API serves: each page calls the services the ``/api`` routes call, never
the store or the ``/api`` routes (import-linter contracts keep SQL and ``relay.control.routes`` out of
this package). See ``web`` for the shared parts (security headers, viewer, CSRF, mounting a page
module's route table), ``session`` for sign-in cookies, and the ``*_pages`` modules, each with its
``ROUTES`` table of small handlers.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from relay.control.dashboard import (
    admin_pages,
    audit_pages,
    batch_downloads,
    batch_pages,
    edit_pages,
    overview_pages,
    self_pages,
    signin_pages,
    sso_pages,
    usage_pages,
    webhook_pages,
)
from relay.control.dashboard.web import HEADERS, Dashboard, mount

__all__ = ["Dashboard", "mount_dashboard"]

STATIC_TYPES: Final = {
    "relay.css": "text/css; charset=utf-8",
    "relay.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


#: The page modules, in the order their routes are mounted.
PAGES: Final = (
    signin_pages,
    sso_pages,
    overview_pages,
    batch_pages,
    batch_downloads,
    usage_pages,
    admin_pages,
    edit_pages,
    self_pages,
    webhook_pages,
    audit_pages,
)


def _load_static() -> dict[str, bytes]:
    folder = resources.files("relay.control.dashboard") / "static"
    return {name: (folder / name).read_bytes() for name in STATIC_TYPES}


def mount_dashboard(app: FastAPI, dash: Dashboard) -> None:
    router = APIRouter()
    static = _load_static()

    async def root(_request: Request) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return Response(
                b'{"error": {"code": "not_found", "message": "no such asset"}}',
                status_code=404,
                media_type="application/json",
                headers=HEADERS,
            )
        headers = {**HEADERS, "cache-control": "public, max-age=300"}
        return Response(static[name], media_type=STATIC_TYPES[name], headers=headers)

    router.add_api_route("/ui", root, methods=["GET"], include_in_schema=False)
    router.add_api_route("/ui/static/{name}", asset, methods=["GET"], include_in_schema=False)
    for pages in PAGES:
        mount(router, dash, pages.ROUTES)
    app.include_router(router)
