"""The control-plane ASGI app (SPEC §11): the FastAPI app that every control route table is mounted
on (``routes/<noun>.py``: the catalog here, the rest through ``extra_routes``), the admin bearer
dependency, and the handlers that turn every error into the API's one error shape.

What it deliberately does not know: what a route does (thin handlers in ``routes/`` over ``services/``),
and the checks made before FastAPI sees a request (``control.guard``).

Invariants: every error leaves as ``{"error": {"code", "message"}}``; request validation failures are
400 naming the field (422 for ``UNPROCESSABLE_FIELDS``, where the contract says so). The admin
bearer is compared in constant time and never logged.
"""

from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from relay.control.routes import openapi
from relay.control.routes.catalog import catalog_routes
from relay.control.routes.docs import mount_docs
from relay.control.routes.metrics import metrics_routes
from relay.control.routes.table import mount
from relay.control.services.apply import ApplyService
from relay.control.services.catalog import CatalogService
from relay.control.services.validation import UNPROCESSABLE_FIELDS
from relay.crypto.sealing import constant_time_equal
from relay.errors import RateLimited, RelayError, Unauthenticated
from relay.http.errors import control_error, error_headers, escaped, retry_after
from relay.snapshot.reloader import CatalogReloader
from relay.store.engine import database_unavailable


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
        docs_url=None,  # served by routes.docs from Relay's own copy of Swagger UI: no CDN, works offline
        redoc_url=None,
        # No bodiless 307 to the path without its trailing slash (``/api/teams/%2F`` included): an
        # unknown path is a JSON 404 like every other answer of the control API.
        redirect_slashes=False,
    )
    app.add_middleware(JsonBodies)
    mount_docs(app)
    require_admin = admin_dependency(admin_token)
    install_error_handlers(app)
    mount(app, catalog_routes(catalog, applier, reloader), require_admin)
    mount(app, metrics_routes(registry), require_admin)
    if extra_routes is not None:
        extra_routes(app, require_admin)
    openapi.install(app)  # every status with the error schema, real catalog response schemas
    return app


def admin_dependency(admin_token: str) -> Callable[..., Awaitable[None]]:
    """The admin bearer check, declared through HTTPBearer so the OpenAPI document (and /api/docs)
    knows the scheme. The guard refuses a wrong bearer before any body is read; this check keeps the
    app safe on its own."""
    bearer = HTTPBearer(auto_error=False, description="RELAY_ADMIN_TOKEN")

    async def require_admin(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if credentials is None or not credentials.credentials:
            raise Unauthenticated("missing admin bearer token")
        if not constant_time_equal(credentials.credentials.strip(), admin_token):
            raise Unauthenticated("invalid admin token")

    return require_admin


def install_error_handlers(app: FastAPI) -> None:
    """Every error leaves as ``{"error": {"code", "message"}}``, never Starlette's text/plain."""
    app.add_exception_handler(RelayError, _relay_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    for failure in (SQLAlchemyError, OSError):
        app.add_exception_handler(failure, _database_error)


async def _relay_error(_request: Request, exc: RelayError) -> JSONResponse:
    headers = None
    if isinstance(exc, RateLimited):
        headers = {"retry-after": retry_after(exc).decode()}
    return JSONResponse(control_error(exc.code, exc.message), status_code=exc.status, headers=headers)


async def _unexpected(_request: Request, _exc: Exception) -> JSONResponse:
    # Starlette's last handler: JSON, never its text/plain page; the guard logs the traceback.
    return JSONResponse(control_error("internal_error", "internal error"), status_code=500)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    parts = []
    errors = exc.errors()
    first = [p for p in errors[0].get("loc", ()) if p != "body"] if errors else []
    # SPEC §20: every invalid field of a guardrail is a 422, like the fields SPEC names elsewhere.
    unprocessable = (first and first[0] in UNPROCESSABLE_FIELDS) or request.url.path.startswith(
        "/api/guardrails"
    )
    status, code = (422, "unprocessable") if unprocessable else (400, "invalid_request")
    for err in errors[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body",))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            return JSONResponse(control_error("invalid_json", "body is not valid JSON"), status_code=400)
        parts.append(f"{loc}: {msg}" if loc else msg)
    return JSONResponse(control_error(code, "; ".join(parts)), status_code=status)


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
