"""``/api/docs``: Swagger UI over ``/api/openapi.json``, with its JavaScript and CSS served by Relay (no
CDN: it works offline). The files come from the ``fastapi-offline`` wheel (a maintained Swagger UI 5
build, which renders OpenAPI 3.1).

What it deliberately does not know: the document itself (``routes.openapi`` rewrites it).
"""

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS = "/api/docs/assets"


async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/api/openapi.json",
        title="Relay control API",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
    )


def mount_docs(app: FastAPI) -> None:
    """The assets under ``DOCS_ASSETS``, then the page (both outside the document)."""
    app.mount(
        DOCS_ASSETS, StaticFiles(directory=Path(fastapi_offline.__file__).parent / "static"), name="docs"
    )
    app.add_api_route("/api/docs", docs, methods=["GET"], include_in_schema=False)
