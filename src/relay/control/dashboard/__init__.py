"""The web dashboard at ``/ui/`` on the control port (SPEC §16).

Stack, and why: server-rendered Jinja2 templates, one small stylesheet and one small vanilla
JavaScript module (live updates by polling HTML fragments), charts drawn as inline SVG on the server.
Everything is package data served by Relay itself (no CDN, works offline), no build step (``make demo``
and ``make test`` need only Python and PyPI), a page weighs a few KB, and the Content-Security-Policy
can forbid every inline script and style.

It renders what the control API serves: each page calls the services the ``/api`` routes call, never
the store (an import-linter contract keeps SQL out of this package). See ``web`` for the shared parts
(security headers, viewer, CSRF), ``session`` for sign-in cookies, and the ``*_pages`` modules.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from relay.control.dashboard.admin_pages import mount_admin_pages
from relay.control.dashboard.batch_downloads import mount_batch_downloads
from relay.control.dashboard.pages import mount_pages
from relay.control.dashboard.usage_pages import mount_usage_pages
from relay.control.dashboard.web import HEADERS, Dashboard
from relay.control.dashboard.webhook_pages import mount_webhook_pages

__all__ = ["Dashboard", "mount_dashboard"]

STATIC_TYPES: Final = {
    "relay.css": "text/css; charset=utf-8",
    "relay.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


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
    mount_pages(router, dash)
    mount_batch_downloads(router, dash)
    mount_usage_pages(router, dash)
    mount_admin_pages(router, dash)
    mount_webhook_pages(router, dash)
    app.include_router(router)
