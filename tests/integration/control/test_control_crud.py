"""Control-plane CRUD for every catalog kind (SPEC §2, §11), over HTTP against real ``relay serve``
processes on SQLite and on Postgres."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.fixtures.relay_server import RelayProcess


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_world(relay: RelayProcess) -> dict[str, dict[str, Any]]:
    """One object of every kind, wired together, with unique names."""
    w: dict[str, dict[str, Any]] = {}
    w["team"] = relay.create("teams", {"name": uniq("team"), "display_name": "Team"})
    w["host"] = relay.create("hosts", {"name": uniq("host"), "base_url": "https://api.example.com"})
    w["host_key"] = relay.create(
        "host-keys",
        {"name": uniq("hk"), "host": w["host"]["name"], "value": "sk-upstream-" + uuid.uuid4().hex},
    )
    w["model"] = relay.create(
        "models", {"name": uniq("model"), "provider": "openai", "aliases": [uniq("alias")]}
    )
    w["binding"] = relay.create(
        "bindings",
        {
            "name": uniq("bind"),
            "model": w["model"]["name"],
            "host": w["host"]["id"],  # by id
            "adapter": "openai",
            "pricing": {"input": 1.5, "output": 2},
        },
    )
    w["policy"] = relay.create(
        "policies",
        {
            "name": uniq("pol"),
            "models": ["*"],
            "host_keys": [w["host_key"]["name"]],
            "rate_limit": {"rules": [{"meter": "requests", "limit": 5, "window": "1m"}]},
        },
    )
    w["project"] = relay.create(
        "projects", {"name": uniq("prj"), "team": w["team"]["name"], "default_policy": w["policy"]["name"]}
    )
    w["service_account"] = relay.create(
        "service-accounts", {"name": uniq("sa"), "project": w["project"]["name"]}
    )
    w["user"] = relay.create(
        "users",
        {
            "name": uniq("usr"),
            "email": f"{uniq('u')}@example.com",
            "password": "correct horse battery",
            "memberships": [{"project": w["project"]["name"], "policy": w["policy"]["name"]}],
        },
    )
    return w


PLURALS = {
    "team": "teams",
    "host": "hosts",
    "host_key": "host-keys",
    "model": "models",
    "binding": "bindings",
    "policy": "policies",
    "project": "projects",
    "service_account": "service-accounts",
    "user": "users",
}

PATCHES: dict[str, tuple[dict[str, Any], str, Any]] = {
    "team": ({"display_name": "Renamed"}, "display_name", "Renamed"),
    "host": ({"base_url": "http://127.0.0.1:9/"}, "base_url", "http://127.0.0.1:9"),
    "host_key": ({"enabled": False}, "enabled", False),
    "model": ({"aliases": []}, "aliases", []),
    "binding": ({"upstream_name": "real-name"}, "upstream_name", "real-name"),
    "policy": ({"key_selection": "round_robin"}, "key_selection", "round_robin"),
    "project": ({"enabled": False}, "enabled", False),
    "service_account": ({"enabled": False}, "enabled", False),
    "user": ({"enabled": False}, "enabled", False),
}


def test_every_kind_create_read_list_patch(relay: RelayProcess) -> None:
    world = make_world(relay)
    for key, obj in world.items():
        plural = PLURALS[key]
        assert obj["id"] and obj["created_at"] and obj["updated_at"], obj
        by_name = relay.api("GET", f"/api/{plural}/{obj['name']}")
        by_id = relay.api("GET", f"/api/{plural}/{obj['id']}")
        assert by_name.status_code == 200 and by_id.status_code == 200
        assert by_name.json() == by_id.json() == obj
        listed = relay.api("GET", f"/api/{plural}").json()["items"]
        assert obj["id"] in [item["id"] for item in listed]
        patch, field, expected = PATCHES[key]
        patched = relay.api("PATCH", f"/api/{plural}/{obj['name']}", patch)
        assert patched.status_code == 200, patched.text
        assert patched.json()[field] == expected
        assert relay.api("GET", f"/api/{plural}/{obj['id']}").json()[field] == expected


def test_references_render_as_names_and_ids(relay: RelayProcess) -> None:
    w = make_world(relay)
    assert w["binding"]["host"] == w["host"]["name"] and w["binding"]["host_id"] == w["host"]["id"]
    assert w["project"]["default_policy"] == w["policy"]["name"]
    assert w["policy"]["host_keys"] == [w["host_key"]["name"]]
    assert w["user"]["memberships"] == [
        {
            "project": w["project"]["name"],
            "project_id": w["project"]["id"],
            "policy": w["policy"]["name"],
            "policy_id": w["policy"]["id"],
        }
    ]
    assert w["user"]["token_version"] == 1


def test_write_only_fields_never_come_back(relay: RelayProcess) -> None:
    w = make_world(relay)
    for response in (
        relay.api("GET", f"/api/host-keys/{w['host_key']['id']}"),
        relay.api("GET", "/api/host-keys"),
        relay.api("GET", f"/api/users/{w['user']['id']}"),
        relay.api("GET", "/api/users"),
        relay.api("GET", "/api/export"),
    ):
        text = response.text
        assert "sk-upstream-" not in text and "correct horse" not in text
        assert "password" not in text and "value_encrypted" not in text and "argon2" not in text
    assert w["host_key"]["has_value"] is True


def test_rename_keeps_references(relay: RelayProcess) -> None:
    w = make_world(relay)
    new_name = uniq("renamed")
    assert relay.api("PATCH", f"/api/teams/{w['team']['id']}", {"name": new_name}).status_code == 200
    assert relay.api("GET", f"/api/projects/{w['project']['id']}").json()["team"] == new_name


@pytest.mark.parametrize(
    ("plural", "body", "field"),
    [
        ("teams", {"name": "Bad Name"}, "name"),
        ("teams", {"display_name": "x"}, "name"),
        ("teams", {"name": "ok-name", "colour": "red"}, "colour"),
        ("hosts", {"name": "h-bad-url", "base_url": "ftp://x"}, "base_url"),
        ("models", {"name": "m-bad", "provider": "openai", "aliases": ["a b"]}, "aliases"),
        ("bindings", {"name": "b-bad", "model": "m", "host": "h", "adapter": "grpc"}, "adapter"),
        ("policies", {"name": "p-bad", "models": ["a@B"]}, "models"),
        (
            "policies",
            {"name": "p-bad2", "rate_limit": {"rules": [{"meter": "requests", "limit": 0}]}},
            "limit",
        ),
        (
            "policies",
            {"name": "p-bad3", "rate_limit": {"rules": [{"meter": "requests", "limit": 1, "window": "2m"}]}},
            "window",
        ),
        ("policies", {"name": "p-bad4", "key_selection": "random"}, "key_selection"),
        ("users", {"name": "u-bad", "email": "not-an-email"}, "email"),
        ("users", {"name": "u-bad2", "email": "a@b.c", "password": "short"}, "password"),
        ("host-keys", {"name": "hk-bad", "host": "h"}, "value"),
        ("host-keys", {"name": "hk-bad2", "host": "h", "value": "a", "value_from_env": "B"}, "value"),
    ],
)
def test_bad_input_is_400_naming_the_field(
    relay: RelayProcess, plural: str, body: dict[str, Any], field: str
) -> None:
    before = relay.api("GET", f"/api/{plural}").json()["items"]
    response = relay.api("POST", f"/api/{plural}", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert field in error["message"]
    assert relay.api("GET", f"/api/{plural}").json()["items"] == before


def test_not_json_and_not_object(relay: RelayProcess) -> None:
    response = relay.control.post(
        "/api/teams", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    response = relay.api("POST", "/api/teams", [1, 2])
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request"
    response = relay.api("PATCH", "/api/teams/whatever", [1])
    assert response.status_code in (400, 404)


def test_unknown_reference_is_422_and_nothing_written(relay: RelayProcess) -> None:
    name = uniq("prj")
    response = relay.api("POST", "/api/projects", {"name": name, "team": "no-such-team"})
    assert response.status_code == 422
    assert (
        "team" in response.json()["error"]["message"]
        and "no-such-team" in response.json()["error"]["message"]
    )
    assert relay.api("GET", f"/api/projects/{name}").status_code == 404


def test_failed_child_write_leaves_nothing(relay: RelayProcess) -> None:
    w = make_world(relay)
    name = uniq("pol")
    response = relay.api(
        "POST", "/api/policies", {"name": name, "host_keys": [w["host_key"]["name"], "missing-key"]}
    )
    assert response.status_code == 422
    assert relay.api("GET", f"/api/policies/{name}").status_code == 404


def test_unknown_object_is_404(relay: RelayProcess) -> None:
    for plural in PLURALS.values():
        for method in ("GET", "PATCH", "DELETE"):
            response = relay.api(method, f"/api/{plural}/does-not-exist", {} if method == "PATCH" else None)
            assert response.status_code == 404, (plural, method, response.text)
            assert response.json()["error"]["code"] == "not_found"
    assert relay.api("GET", "/api/widgets").status_code == 404


def test_duplicate_names_are_409(relay: RelayProcess) -> None:
    w = make_world(relay)
    for key, obj in w.items():
        plural = PLURALS[key]
        current = relay.api("GET", f"/api/{plural}/{obj['id']}").json()
        body = {"name": obj["name"]}
        if key == "team":
            body["display_name"] = "again"
        response = relay.api("POST", f"/api/{plural}", {**_minimal(key, w), **body})
        assert response.status_code == 409, (key, response.text)
        assert relay.api("GET", f"/api/{plural}/{obj['id']}").json() == current
    other = relay.create("teams", {"name": uniq("team")})
    response = relay.api("PATCH", f"/api/teams/{other['id']}", {"name": w["team"]["name"]})
    assert response.status_code == 409


def _minimal(key: str, w: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "team": {},
        "host": {"base_url": "https://x.example"},
        "host_key": {"host": w["host"]["name"], "value": "v"},
        "model": {"provider": "openai"},
        "binding": {"model": w["model"]["name"], "host": w["host"]["name"], "adapter": "openai"},
        "policy": {},
        "project": {"team": w["team"]["name"]},
        "service_account": {"project": w["project"]["name"]},
        "user": {"email": f"{uniq('x')}@example.com"},
    }[key]


def test_model_names_and_aliases_share_one_namespace(relay: RelayProcess) -> None:
    first = relay.create("models", {"name": uniq("m"), "provider": "openai", "aliases": [uniq("a")]})
    response = relay.api(
        "POST", "/api/models", {"name": uniq("m"), "provider": "x", "aliases": [first["name"]]}
    )
    assert response.status_code == 409
    response = relay.api(
        "POST", "/api/models", {"name": uniq("m"), "provider": "x", "aliases": first["aliases"]}
    )
    assert response.status_code == 409
    response = relay.api("POST", "/api/models", {"name": first["aliases"][0], "provider": "x"})
    assert response.status_code == 409


def test_deleting_referenced_objects_is_409_then_allowed(relay: RelayProcess) -> None:
    w = make_world(relay)
    refused = [
        ("teams", w["team"]),
        ("hosts", w["host"]),
        ("host-keys", w["host_key"]),
        ("models", w["model"]),
        ("policies", w["policy"]),
        ("projects", w["project"]),
    ]
    for plural, obj in refused:
        response = relay.api("DELETE", f"/api/{plural}/{obj['id']}")
        assert response.status_code == 409, (plural, response.text)
        assert "still referenced" in response.json()["error"]["message"]
        assert relay.api("GET", f"/api/{plural}/{obj['id']}").status_code == 200
    # Delete from the leaves up: every delete then succeeds.
    for key in (
        "user",
        "service_account",
        "project",
        "policy",
        "binding",
        "model",
        "host_key",
        "host",
        "team",
    ):
        response = relay.api("DELETE", f"/api/{PLURALS[key]}/{w[key]['name']}")
        assert response.status_code == 204, (key, response.text)
        assert relay.api("GET", f"/api/{PLURALS[key]}/{w[key]['id']}").status_code == 404


def test_host_key_sources_switch_with_patch(relay: RelayProcess) -> None:
    host = relay.create("hosts", {"name": uniq("h"), "base_url": "https://x.example"})
    key = relay.create("host-keys", {"name": uniq("hk"), "host": host["name"], "value": "secret-a"})
    switched = relay.api("PATCH", f"/api/host-keys/{key['id']}", {"value_from_env": "MY_UPSTREAM_KEY"}).json()
    assert switched["value_from_env"] == "MY_UPSTREAM_KEY" and switched["has_value"] is False
    back = relay.api("PATCH", f"/api/host-keys/{key['id']}", {"value": "secret-b"}).json()
    assert back["value_from_env"] is None and back["has_value"] is True
    untouched = relay.api("PATCH", f"/api/host-keys/{key['id']}", {"enabled": False}).json()
    assert untouched["has_value"] is True


def test_admin_bearer_is_required(relay: RelayProcess) -> None:
    bare = httpx.Client(base_url=relay.control_url)
    assert bare.get("/api/teams").status_code == 401
    assert bare.get("/api/teams").json()["error"]["code"] == "unauthenticated"
    assert bare.get("/api/teams", headers={"Authorization": "Bearer wrong-token-xxxxxxxx"}).status_code == 401
    assert bare.post("/api/teams", json={"name": "sneaky"}).status_code == 401
    openapi = bare.get("/api/openapi.json")
    assert openapi.status_code == 200
    paths = openapi.json()["paths"]
    for plural in PLURALS.values():
        assert f"/api/{plural}" in paths and f"/api/{plural}/{{ref}}" in paths
    assert "/api/apply" in paths
    assert bare.get("/metrics").status_code == 200


def test_probes(relay: RelayProcess) -> None:
    assert relay.inference.get("/livez").json() == {"status": "ok"}
    health = relay.inference.get("/healthz")
    assert health.status_code == 200 and health.json()["database"] == "ok"
