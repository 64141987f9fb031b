"""Mounting a dashboard page table (relay.control.dashboard.web.mount): each handler gets the
``Dashboard`` bound, FastAPI sees only the request (no ``dash`` query parameter), the route is named
after the page, and a refusal renders as the error page with its status."""

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute

from relay.control.dashboard.web import Dashboard, Refused, mount


async def page(dash: Dashboard, request: Request) -> Response:
    """A page."""
    return Response(f"{dash.admin_token}:{request.url.path}")


async def refusing(dash: Dashboard, request: Request) -> Response:
    raise Refused(409, "not now")


def routes(router: APIRouter) -> list[APIRoute]:
    return [r for r in router.routes if isinstance(r, APIRoute)]


SERVICES = ("catalog", "keys", "tokens", "batches", "batch_service", "usage", "health")


def dashboard() -> Dashboard:
    """A dashboard whose services are absent: the pages here never call one."""
    return Dashboard(admin_token="t" * 32, **dict.fromkeys(SERVICES))  # type: ignore[arg-type]


def test_a_page_route_takes_only_the_request_and_is_named_after_its_handler() -> None:
    router = APIRouter()
    mount(router, dashboard(), [("/ui/a", page, ("GET",)), ("/ui/b", refusing, ("GET", "POST"))])
    mounted = routes(router)
    assert [(r.path, r.name, sorted(r.methods)) for r in mounted] == [
        ("/ui/a", "page", ["GET"]),
        ("/ui/b", "refusing", ["GET", "POST"]),
    ]
    for route in mounted:
        assert route.dependant.query_params == [] and route.dependant.body_params == []
        assert route.include_in_schema is False
    assert mounted[0].endpoint.__doc__ == "A page."


async def test_the_handler_gets_the_dashboard_and_a_refusal_is_the_error_page() -> None:
    router = APIRouter()
    mount(router, dashboard(), [("/ui/a", page, ("GET",)), ("/ui/b", refusing, ("GET",))])
    app = FastAPI()
    app.include_router(router)
    answers = {path: await call(app, path) for path in ("/ui/a", "/ui/b")}
    assert answers["/ui/a"] == (200, f"{'t' * 32}:/ui/a".encode())
    status, body = answers["/ui/b"]
    assert status == 409 and b"not now" in body


async def call(app: FastAPI, path: str) -> tuple[int, bytes]:
    """One GET through the ASGI interface, in process."""
    sent: list[dict] = []
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("test", 80),
        "client": ("127.0.0.1", 1),
        "root_path": "",
    }

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body
