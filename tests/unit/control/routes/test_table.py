"""The control API's route tables (relay.control.routes.table): a table mounts exactly as the
decorators it replaced would have, so the OpenAPI document (operation ids, schemas, statuses,
security) and the routes' order do not depend on which way a route was declared."""

from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from relay.control.routes.table import Route, mount

BEARER = HTTPBearer(auto_error=False)
QUERY = [{"name": "limit", "in": "query", "required": False, "schema": {"type": "string"}}]


async def require_admin(credentials: HTTPAuthorizationCredentials | None = Depends(BEARER)) -> None:
    return None


async def list_things(request: Request) -> dict[str, Any]:
    """Things, newest first."""
    return {"items": []}


async def create_thing(payload: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    return JSONResponse(payload, status_code=201)


async def read_thing(ref: str) -> dict[str, Any]:
    return {"id": ref}


async def login(payload: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    return {}


def decorated() -> FastAPI:
    app = FastAPI()
    admin = [Depends(require_admin)]
    app.get("/api/things", dependencies=admin, tags=["Thing"], openapi_extra={"parameters": QUERY})(
        list_things
    )
    app.post("/api/things", dependencies=admin, tags=["Thing"], status_code=201, summary="Create")(
        create_thing
    )
    app.get("/api/things/{ref}", dependencies=admin, tags=["Thing"])(read_thing)
    app.post("/api/auth/login", tags=["Auth"])(login)
    app.get("/metrics", include_in_schema=False)(read_thing)
    return app


def tabled() -> FastAPI:
    app = FastAPI()
    table = [
        Route("GET", "/api/things", list_things, "Thing", query=QUERY),
        Route("POST", "/api/things", create_thing, "Thing", status_code=201, summary="Create"),
        Route("GET", "/api/things/{ref}", read_thing, "Thing"),
        Route("POST", "/api/auth/login", login, "Auth", admin=False),
        Route("GET", "/metrics", read_thing, None, admin=False, options={"include_in_schema": False}),
    ]
    mount(app, table, require_admin)
    return app


def test_a_table_mounts_as_the_decorators_would() -> None:
    assert tabled().openapi() == decorated().openapi()


def test_a_table_keeps_its_order_and_its_handlers_names() -> None:
    def routes(app: FastAPI) -> list[tuple[str, str, str]]:
        return [
            (r.path, ",".join(sorted(r.methods)), r.name)
            for r in app.routes
            if r.path.startswith(("/api/t", "/api/a", "/m"))
        ]

    assert routes(tabled()) == routes(decorated())
    assert [name for _, _, name in routes(tabled())] == [
        "list_things",
        "create_thing",
        "read_thing",
        "login",
        "read_thing",
    ]


def test_an_unset_response_model_is_still_inferred_from_the_return_annotation() -> None:
    # Passing response_model=None would drop the schema FastAPI infers from ``-> dict[str, Any]``.
    operation = tabled().openapi()["paths"]["/api/things/{ref}"]["get"]
    assert "schema" in operation["responses"]["200"]["content"]["application/json"]
    assert operation["security"] == [{"HTTPBearer": []}]
    assert "security" not in tabled().openapi()["paths"]["/api/auth/login"]["post"]
