"""The control-plane ASGI app (SPEC §11): ``/api`` CRUD for every catalog kind, apply/export,
reload, snapshot status, ``/metrics`` and ``/api/openapi.json``.

Handlers are thin: parse, call a service, render. Every error leaves as
``{"error": {"code", "message"}}``; request validation failures are 400 naming the field. The admin
bearer is compared in constant time and never logged.
"""

import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

import fastapi_offline
from fastapi import Body, Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from relay.control import openapi
from relay.control.apply import ApplyService
from relay.control.catalog import CatalogService
from relay.control.kinds import KINDS, Kind
from relay.crypto.sealing import constant_time_equal
from relay.errors import RateLimited, RelayError, Unauthenticated
from relay.http.errors import control_error, error_headers, escaped, retry_after
from relay.snapshot.reloader import CatalogReloader
from relay.store.engine import database_unavailable


class ApplyRequest(BaseModel):
    documents: list[dict[str, Any]]
    dry_run: bool = False
    prune: bool = False


class ApplyPlanStep(BaseModel):
    kind: str
    name: str
    action: str = Field(description="create | update | unchanged | delete")
    changes: dict[str, dict[str, Any]] | None = Field(
        None, description="update only: {field: {from, to}}; write-only values show as ********"
    )
    secret: str | None = Field(
        None, description="a Webhook created without a secret: the generated secret, shown only here"
    )


class ApplyPlan(BaseModel):
    plan: list[ApplyPlanStep]


class JsonBodies:
    """The control API speaks JSON only: a body sent without ``Content-Type: application/json`` (curl's
    ``-d`` default is form-encoded) is read as JSON anyway, so the caller gets a JSON verdict on it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


def build_control_app(
    *,
    admin_token: str,
    catalog: CatalogService,
    applier: ApplyService,
    reloader: CatalogReloader,
    registry: CollectorRegistry,
    extra_routes: Callable[[FastAPI, Callable[..., Awaitable[None]]], None] | None = None,
) -> FastAPI:
    app = FastAPI(
        title="Relay control API",
        version="1",
        openapi_url="/api/openapi.json",
        docs_url=None,  # served below from Relay's own copy of Swagger UI: no CDN, works offline
        redoc_url=None,
        # No bodiless 307 to the path without its trailing slash (``/api/teams/%2F`` included): an
        # unknown path is a JSON 404 like every other answer of the control API.
        redirect_slashes=False,
    )
    app.add_middleware(JsonBodies)
    _mount_docs(app)

    bearer = HTTPBearer(auto_error=False, description="RELAY_ADMIN_TOKEN")

    async def require_admin(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        # Declared through HTTPBearer so the OpenAPI document (and /api/docs) knows the scheme.
        if credentials is None or not credentials.credentials:
            raise Unauthenticated("missing admin bearer token")
        if not constant_time_equal(credentials.credentials.strip(), admin_token):
            raise Unauthenticated("invalid admin token")

    admin = [Depends(require_admin)]

    @app.exception_handler(RelayError)
    async def _relay_error(_request: Request, exc: RelayError) -> JSONResponse:
        headers = None
        if isinstance(exc, RateLimited):
            headers = {"retry-after": retry_after(exc).decode()}
        return JSONResponse(control_error(exc.code, exc.message), status_code=exc.status, headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, _exc: Exception) -> JSONResponse:
        # Starlette's last handler: JSON, never its text/plain page; the guard logs the traceback.
        return JSONResponse(control_error("internal_error", "internal error"), status_code=500)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") == "json_invalid":
                return JSONResponse(control_error("invalid_json", "body is not valid JSON"), status_code=400)
            parts.append(f"{loc}: {msg}" if loc else msg)
        return JSONResponse(control_error("invalid_request", "; ".join(parts)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(control_error(code, str(exc.detail)), status_code=exc.status_code)

    async def _database_error(_request: Request, exc: Exception) -> JSONResponse:
        # A database that is away: JSON 503 + Retry-After (degraded, not broken), never a traceback.
        failure = escaped(exc, "control request", database_unavailable)
        headers = {k.decode(): v.decode() for k, v in error_headers(failure)}
        return JSONResponse(
            control_error(failure.code, failure.message), status_code=failure.status, headers=headers
        )

    for failure in (SQLAlchemyError, OSError):
        app.add_exception_handler(failure, _database_error)

    for kind in KINDS:
        _mount_kind(app, kind, catalog, admin)

    @app.post(
        "/api/apply",
        dependencies=admin,
        response_model=ApplyPlan,
        response_model_exclude_none=True,
        tags=["apply"],
    )
    async def apply(body: ApplyRequest) -> dict[str, Any]:
        """Apply catalog documents in one transaction (all or nothing); answers the plan."""
        plan = await applier.apply(body.documents, dry_run=body.dry_run, prune=body.prune)
        return {"plan": plan}

    @app.get("/api/export", dependencies=admin, tags=["apply"])
    async def export() -> dict[str, Any]:
        """The catalog as apply documents, without secrets."""
        return {"documents": await applier.export()}

    @app.post("/api/reload", dependencies=admin, tags=["catalog"])
    async def reload() -> dict[str, Any]:
        """Make every replica rebuild its snapshot: this one before answering, the others within 2 s
        (the revision moves, so even a replica that missed the notice reloads on its next poll)."""
        return {"revision": await catalog.force_reload()}

    @app.get("/api/snapshot", dependencies=admin, tags=["catalog"])
    async def snapshot_status() -> dict[str, Any]:
        """Which catalog revision this replica serves, how many objects of each kind it holds, and the
        entries it cannot use as configured (e.g. a host key whose environment variable is unset)."""
        snap = reloader.snapshot
        return {
            "revision": snap.revision,
            "loaded_at": snap.loaded_at,
            "counts": snap.counts(),
            "problems": list(snap.problems),
        }

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    if extra_routes is not None:
        extra_routes(app, require_admin)
    openapi.install(app)  # every status with the error schema, real catalog response schemas
    return app


DOCS_ASSETS = "/api/docs/assets"


def _mount_docs(app: FastAPI) -> None:
    """``/api/docs``: Swagger UI with its JavaScript and CSS served by Relay. The files come from the
    ``fastapi-offline`` wheel (a maintained Swagger UI 5 build, which renders OpenAPI 3.1)."""
    app.mount(
        DOCS_ASSETS, StaticFiles(directory=Path(fastapi_offline.__file__).parent / "static"), name="docs"
    )

    @app.get("/api/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/api/openapi.json",
            title="Relay control API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )


def _mount_kind(app: FastAPI, kind: Kind, catalog: CatalogService, admin: list[Any]) -> None:
    tag = kind.name
    base = f"/api/{kind.plural}"

    async def list_objects() -> dict[str, Any]:
        return {"items": await catalog.list_all(kind)}

    async def create_object(payload: BaseModel) -> JSONResponse:
        created = await catalog.create(kind, payload.model_dump(exclude_unset=True))
        return JSONResponse(created, status_code=201)

    # Give the body its real model, so FastAPI validates it and the OpenAPI document shows it.
    create_object.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "payload", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[kind.spec, Body()]
            )
        ]
    )

    async def get_object(ref: str) -> dict[str, Any]:
        return await catalog.get(kind, ref)

    async def patch_object(ref: str, payload: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return await catalog.patch(kind, ref, payload)

    async def delete_object(ref: str) -> Response:
        await catalog.delete(kind, ref)
        return Response(status_code=204)

    app.add_api_route(
        base, list_objects, methods=["GET"], dependencies=admin, tags=[tag], summary=f"List {kind.plural}"
    )
    app.add_api_route(
        base,
        create_object,
        methods=["POST"],
        dependencies=admin,
        tags=[tag],
        status_code=201,
        summary=f"Create a {kind.name}",
    )
    app.add_api_route(
        base + "/{ref}",
        get_object,
        methods=["GET"],
        dependencies=admin,
        tags=[tag],
        summary=f"Read a {kind.name}",
    )
    app.add_api_route(
        base + "/{ref}",
        patch_object,
        methods=["PATCH"],
        dependencies=admin,
        tags=[tag],
        summary=f"Change fields of a {kind.name}",
    )
    app.add_api_route(
        base + "/{ref}",
        delete_object,
        methods=["DELETE"],
        dependencies=admin,
        tags=[tag],
        status_code=204,
        summary=f"Delete a {kind.name} (409 while referenced)",
    )
