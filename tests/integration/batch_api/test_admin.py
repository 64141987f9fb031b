"""The admin batch API (SPEC §11, last bullet) on SQLite and Postgres: every owner's batches with
filters and keyset pages, one batch with failures grouped by §10.4 cause, an admin cancel."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.fixtures.live import Gateway, uniq
from tests.fixtures.relay_server import ADMIN_TOKEN
from tests.integration.batch_api.helpers import chat_item, status, submit, wait_finished


def admin_get(gw: Gateway, path: str, **params: Any) -> httpx.Response:
    return gw.relay.control.get(path, params=params)


def listing(gw: Gateway, **params: Any) -> dict[str, Any]:
    response = admin_get(gw, "/api/batches", **params)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"items", "next_cursor"}
    return dict(body)


def other_project(gw: Gateway) -> tuple[str, str]:
    """A second team/project/service account under the module policy; (project name, relay key)."""
    team, project, account = uniq("t"), uniq("pr"), uniq("sa")
    gw.create("teams", {"name": team, "display_name": "Other"})
    gw.create("projects", {"name": project, "team": team, "default_policy": gw.policy})
    gw.create("service-accounts", {"name": account, "project": project})
    key = gw.create("keys", {"principal_kind": "serviceaccount", "principal": account})
    return project, str(key["plaintext"])


def test_lists_every_owner_with_filters_and_pages(gateway: Gateway) -> None:
    project, key = other_project(gateway)
    mine = [submit(gateway, "openai", [chat_item(i)]) for i in range(3)]
    theirs = submit(gateway, "openai", [chat_item(0), chat_item(1)], key=key)
    for batch_id in [*mine, theirs]:
        wait_finished(gateway, batch_id, key=key if batch_id == theirs else None)

    everything = listing(gateway, limit=1000)["items"]
    ids = [item["id"] for item in everything]
    assert set(mine) | {theirs} <= set(ids)
    created = [item["created_at"] for item in everything]
    assert created == sorted(created, reverse=True)  # newest first

    only = listing(gateway, project=project)["items"]
    assert [item["id"] for item in only] == [theirs]
    item = only[0]
    assert item["api"] == "relay" and item["state"] == "completed" and item["status"] == "queued"
    assert item["counts"] == {"completed": 2} and item["total_items"] == 2 and item["finished_items"] == 2
    key_id = item["credential_id"]
    assert item["owner"] == f"key:{key_id}"
    assert "key_hash" not in item and "token_claims" not in item  # no secret-derived value (§3.1)
    assert all(not str(v).startswith(("sk-relay-",)) for v in item.values())

    team_id = gateway.object_id("projects", project)
    assert [i["id"] for i in listing(gateway, project=team_id)["items"]] == [theirs]  # id works as well
    assert [i["id"] for i in listing(gateway, owner=f"key:{key_id}")["items"]] == [theirs]
    assert listing(gateway, project=project, state="in_progress")["items"] == []
    assert listing(gateway, project=project, state="cancelled")["items"] == []
    assert len(listing(gateway, project=project, state="completed", api="relay")["items"]) == 1
    assert listing(gateway, project=project, to=item["created_at"])["items"] == []  # `to` is exclusive
    assert len(listing(gateway, project=project, **{"from": item["created_at"]})["items"]) == 1

    # Keyset pages of one: every batch once, in order, then a null cursor.
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1, "project": gateway.project}
        if cursor:
            params["cursor"] = cursor
        page = listing(gateway, **params)
        seen += [i["id"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [i["id"] for i in listing(gateway, project=gateway.project, limit=1000)["items"]]
    assert set(mine) <= set(seen) and theirs not in seen


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"state": "running"}, "state"),
        ({"api": "gemini"}, "api"),
        ({"owner": "someone"}, "owner"),
        ({"from": "yesterday"}, "from"),
        ({"to": "2026-01-01T00:00:00"}, "to"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"projcet": "x"}, "projcet"),
    ],
)
def test_bad_filters_are_400_naming_the_field(gateway: Gateway, params: dict[str, str], field: str) -> None:
    response = admin_get(gateway, "/api/batches", **params)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]


def test_detail_groups_failures_by_cause(gateway: Gateway) -> None:
    items = [
        chat_item(0),
        chat_item(1, fake={"status": 400}),
        chat_item(2, fake={"status": 400}),
        chat_item(3, model="no-such-model"),
    ]
    batch_id = submit(gateway, "openai", items)
    wait_finished(gateway, batch_id)
    response = admin_get(gateway, f"/api/batches/{batch_id}")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["id"] == batch_id and body["state"] == "completed"
    assert body["counts"] == {"completed": 1, "discarded": 3}
    causes = {f["cause"]: f for f in body["failures"]}
    assert set(causes) == {"upstream returned 400", "routing"}
    assert causes["upstream returned 400"]["count"] == 2
    assert causes["routing"]["count"] == 1
    assert causes["routing"]["examples"][0].startswith("routing: ")
    assert body["failures"][0]["cause"] == "upstream returned 400"  # most items first

    missing = admin_get(gateway, "/api/batches/b_nosuchbatch")
    assert missing.status_code == 404
    assert missing.json()["error"]["message"] == "batch not found"


def test_admin_cancels_any_owners_batch(gateway: Gateway) -> None:
    _, key = other_project(gateway)
    slow = [chat_item(i, fake={"latency_ms": 400}) for i in range(60)]
    batch_id = submit(gateway, "openai", slow, key=key)
    deadline = time.monotonic() + 30
    while "completed" not in status(gateway, batch_id, key=key)["counts"]:
        assert time.monotonic() < deadline, "no item finished"
        time.sleep(0.05)
    response = gateway.relay.control.post(f"/api/batches/{batch_id}/cancel")
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "cancelled"}
    again = gateway.relay.control.post(f"/api/batches/{batch_id}/cancel")
    assert again.status_code == 200 and again.json() == {"status": "cancelled"}  # idempotent
    view = wait_finished(gateway, batch_id, key=key)
    assert view["Status"] == "cancelled" and view["counts"].get("cancelled", 0) > 0
    detail = admin_get(gateway, f"/api/batches/{batch_id}").json()
    assert detail["state"] == "cancelled" and detail["status"] == "cancelled"
    assert batch_id in [i["id"] for i in listing(gateway, state="cancelled", limit=1000)["items"]]
    assert gateway.relay.control.post("/api/batches/b_nosuchbatch/cancel").status_code == 404


def test_admin_bearer_only_and_documented(gateway: Gateway) -> None:
    base = gateway.relay.control_url
    for method, path in [
        ("GET", "/api/batches"),
        ("GET", "/api/batches/b_x"),
        ("POST", "/api/batches/b_x/cancel"),
    ]:
        assert httpx.request(method, base + path, timeout=10).status_code == 401
        wrong = {"authorization": f"Bearer {ADMIN_TOKEN}x"}
        assert httpx.request(method, base + path, headers=wrong, timeout=10).status_code == 401
        relay_key = {"authorization": f"Bearer {gateway.key}"}
        assert httpx.request(method, base + path, headers=relay_key, timeout=10).status_code == 401
    doc = httpx.get(base + "/api/openapi.json", timeout=10).json()
    assert {"/api/batches", "/api/batches/{batch_id}", "/api/batches/{batch_id}/cancel"} <= set(doc["paths"])
    names = {p["name"] for p in doc["paths"]["/api/batches"]["get"]["parameters"]}
    assert {"project", "team", "owner", "state", "api", "from", "to", "limit", "cursor"} <= names
