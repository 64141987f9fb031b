"""Routes as data: a control API operation is a :class:`Route` (method + path → handler, and what the
OpenAPI document says of it), and :func:`mount` adds a table of them to the app.

What it deliberately does not know: what a handler does, or which services it calls (the route
modules' handler objects hold those). The handler's own name, signature and docstring are what FastAPI
reads, so a route mounted from a table has the operation id, parameters and description it would have
had from a decorator.

Invariants: options left unset are not passed at all, so FastAPI's defaults apply exactly as they would
to ``@app.get`` (an explicit ``response_model=None`` would drop the schema FastAPI infers from the
return annotation); a table is mounted in its order, which is the order of the OpenAPI ``paths``.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Depends, FastAPI


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Callable[..., Any]
    tag: str | None  # the OpenAPI tag (None: untagged)
    status_code: int | None = None
    summary: str | None = None
    admin: bool = True  # behind the admin bearer (the session routes under /api/auth/ are not)
    query: list[dict[str, Any]] | None = None  # query parameters parsed by hand, for the document
    options: dict[str, Any] = field(default_factory=dict)  # any other add_api_route option


def mount(app: FastAPI, routes: Iterable[Route], require_admin: Callable[..., Any]) -> None:
    """Add ``routes`` to ``app``; admin routes depend on ``require_admin``."""
    for route in routes:
        options = dict(route.options)
        if route.status_code is not None:
            options["status_code"] = route.status_code
        if route.summary is not None:
            options["summary"] = route.summary
        if route.query is not None:
            options["openapi_extra"] = {"parameters": route.query}
        if route.admin:
            options["dependencies"] = [Depends(require_admin)]
        if route.tag is not None:
            options["tags"] = [route.tag]
        app.add_api_route(route.path, route.handler, methods=[route.method], **options)
