"""The batch APIs' route matching (relay.batch_apis.router.match): paths compiled by Starlette, the
404 and the 405 with its ``Allow`` in the table's order, empty segments folded away."""

from __future__ import annotations

import pytest

from relay.batch_apis.router import ApiCall, ApiRoute, match
from relay.errors import NotFound
from relay.http.wire import MethodNotAllowed


async def handler(call: ApiCall) -> None:
    return None


ROUTES = [
    ApiRoute("GET", "", handler),
    ApiRoute("POST", "", handler),
    ApiRoute("GET", "{id}", handler),
    ApiRoute("DELETE", "{id}", handler),
    ApiRoute("POST", "{id}/cancel", handler),
]


def parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p]


@pytest.mark.parametrize(
    ("method", "path", "index", "params"),
    [
        ("GET", "", 0, {}),
        ("POST", "/", 1, {}),
        ("GET", "/b_1", 2, {"id": "b_1"}),
        ("DELETE", "//b_1/", 3, {"id": "b_1"}),
        ("POST", "/b_1//cancel", 4, {"id": "b_1"}),
    ],
)
def test_a_path_finds_its_route_and_segments(
    method: str, path: str, index: int, params: dict[str, str]
) -> None:
    route, found = match(ROUTES, method, parts(path), path)
    assert route is ROUTES[index]
    assert found == params


def test_a_wrong_method_is_a_405_allowing_the_tables_methods_in_order() -> None:
    with pytest.raises(MethodNotAllowed) as refused:
        match(ROUTES, "PUT", parts("/b_1"), "/b_1")
    assert refused.value.allowed == ("GET", "DELETE")


@pytest.mark.parametrize("path", ["/b_1/cancel/more", "/b_1/cancelled", "/b_1/cancel\n", "/b_1/results"])
def test_an_unknown_path_is_a_404_naming_it(path: str) -> None:
    with pytest.raises(NotFound, match="no route for POST"):
        match(ROUTES, "POST", parts(path), path)
