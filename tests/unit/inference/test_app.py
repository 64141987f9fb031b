"""``InferenceApp`` in-process (SPEC §7): the route table, Relay's errors in the caller's shape (OpenAI's
or Anthropic's) before and after authentication, 405 with ``Allow``, unknown routes, ``GET /v1/models``
and the probes — through ``httpx.ASGITransport`` over a hand-built catalog."""

from __future__ import annotations

import pytest

from tests.fixtures.fake_upstream import FakeUpstream
from tests.fixtures.planes import CHAT_MODEL
from tests.unit.inference.conftest import LivePlane, anthropic_error, message, openai_error

OPENAI_PATHS = [
    "/openai/v1/chat/completions",
    "/v1/chat/completions",
    "/openai/v1/responses",
    "/v1/responses",
    "/openai/v1/embeddings",
    "/v1/embeddings",
    "/v1/messages",
    "/v1/generate",
]


@pytest.mark.parametrize("path", OPENAI_PATHS)
async def test_openai_shaped_errors(plane: LivePlane, fake: FakeUpstream, path: str) -> None:
    auth = {"authorization": f"Bearer {plane.catalog.key}"}
    post = plane.client.post
    openai_error(
        await post(path, content=b'{"model": ', headers=auth), 400, "invalid_json", "invalid_request_error"
    )
    openai_error(await post(path, content=b"[1, 2]", headers=auth), 400, "invalid_json")
    openai_error(await plane.post(path, {"input": "x"}), 400, "missing_model", "invalid_request_error")
    openai_error(await plane.post(path, {"model": ""}), 400, "missing_model")
    openai_error(
        await plane.post(path, {"model": "no-such-model"}), 404, "model_not_found", "not_found_error"
    )
    openai_error(await post(path, json={"model": CHAT_MODEL}), 401, "unauthenticated", "authentication_error")
    openai_error(await plane.client.get(path), 405, "method_not_allowed")
    assert fake.stats()["requests"] == 0


async def test_anthropic_shaped_errors(plane: LivePlane, fake: FakeUpstream) -> None:
    path = "/anthropic/v1/messages"
    auth = {"authorization": f"Bearer {plane.catalog.key}"}
    anthropic_error(
        await plane.client.post(path, content=b"{nope", headers=auth), 400, "invalid_request_error"
    )
    missing = anthropic_error(await plane.post(path, {"messages": []}), 400, "invalid_request_error")
    assert "model" in missing["message"]
    anthropic_error(await plane.post(path, message("no-such-model")), 404, "not_found_error")
    anthropic_error(await plane.client.post(path, json=message(CHAT_MODEL)), 401, "authentication_error")
    anthropic_error(await plane.client.get(path), 405, "invalid_request_error")
    anthropic_error(await plane.client.post("/anthropic/v1/nope", json={}), 404, "not_found_error")
    assert fake.stats()["requests"] == 0


@pytest.mark.parametrize("path", ["/openai/v1/chat/completions", "/anthropic/v1/messages"])
async def test_method_not_allowed_says_which_method_is(plane: LivePlane, path: str) -> None:
    response = await plane.client.get(path)
    assert response.status_code == 405
    assert response.headers.get("allow") == "POST"


@pytest.mark.parametrize("path", ["/v1/nope", "/openai/v1/nope", "/", "/v2/chat/completions"])
async def test_unknown_route_is_404(plane: LivePlane, path: str) -> None:
    openai_error(await plane.client.post(path, json={}), 404, "not_found", "not_found_error")
    openai_error(await plane.client.get(path), 404, "not_found")


@pytest.mark.parametrize("path", ["/api/teams", "/api/usage/summary", "/ui", "/ui/batches", "/metrics"])
async def test_a_control_plane_path_says_where_the_control_plane_is(plane: LivePlane, path: str) -> None:
    """An admin client or a browser pointed at the inference port learns where to go instead."""
    error = openai_error(await plane.client.get(path), 404, "wrong_plane", "not_found_error")
    assert error["message"] == (
        f"this is Relay's inference plane: GET {path} is served by the control plane "
        "(RELAY_CONTROL_PORT, default 8081)"
    )


@pytest.mark.parametrize("path", ["/v1/models", "/openai/v1/models"])
async def test_model_list_shows_what_the_credential_may_use(plane: LivePlane, path: str) -> None:
    c = plane.catalog
    s = c.scenario()
    narrow = c.build.policy("narrow", models=(s.model.name,), keys=s.keys)
    key = c.build.key("narrow", account=c.account, policy=narrow)[1]
    plane.refresh()
    response = await plane.client.get(path, headers={"authorization": f"Bearer {c.key}"})
    assert response.status_code == 200, response.text
    assert response.headers["x-relay-request-id"]
    listing = response.json()
    assert listing["object"] == "list" and all(m["object"] == "model" for m in listing["data"])
    assert [m["id"] for m in listing["data"]] == sorted([CHAT_MODEL, s.model.name])
    narrowed = (await plane.client.get(path, headers={"authorization": f"Bearer {key}"})).json()
    assert [m["id"] for m in narrowed["data"]] == [s.model.name]


async def test_model_list_needs_a_credential(plane: LivePlane) -> None:
    response = await plane.client.get("/v1/models")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert response.headers["x-relay-request-id"]


async def test_the_probes_answer_without_a_credential(plane: LivePlane) -> None:
    assert (await plane.client.get("/livez")).json() == {"status": "ok"}
    ready = await plane.client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "revision": 1})
    assert (await plane.client.get("/healthz")).json() == {"status": "ok", "database": "ok"}
