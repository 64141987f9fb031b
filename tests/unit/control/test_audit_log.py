"""``control.audit`` in a real runtime, in process on SQLite (``tests.fixtures.runtime``): what the
HTTP suites do not reach cheaply — ``relay apply --prune`` deletions are entries too, a disabled
user's refused sign-in is recorded with its reason, and the request context is per request."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from relay.control.audit.context import RequestContext, current, request_scope
from tests.fixtures.runtime import Planes, running


async def appended(relay: Planes, response: Any) -> list[dict[str, Any]]:
    items = (await relay.control.get("/api/audit", params={"limit": "1000"})).json()["items"]
    request_id = response.headers["x-relay-request-id"]
    return [e for e in reversed(items) if e["request_id"] == request_id]


async def test_prune_deletions_are_entries_with_the_apply(tmp_path: Path) -> None:
    async with running(tmp_path) as relay:
        docs = [{"kind": "Team", "name": n, "spec": {}} for n in ("keep", "gone-a", "gone-b")]
        assert (await relay.control.post("/api/apply", json={"documents": docs})).status_code == 200
        gone = {t["name"]: t["id"] for t in (await relay.control.get("/api/teams")).json()["items"]}
        pruned = await relay.control.post("/api/apply", json={"documents": docs[:1], "prune": True})
        assert pruned.status_code == 200, pruned.text
        entries = await appended(relay, pruned)
    assert [(e["action"], e["kind"], e["ref"]) for e in entries[:-1]] == [
        ("delete", "Team", gone["gone-a"]),
        ("delete", "Team", gone["gone-b"]),
    ]
    assert entries[0]["before"]["name"] == "gone-a" and "after" not in entries[0]
    assert (entries[-1]["action"], entries[-1]["after"]["prune"]) == ("apply", True)


async def test_a_disabled_users_sign_in_is_refused_and_recorded(tmp_path: Path) -> None:
    async with running(tmp_path) as relay:
        user = {"name": "dis", "email": "dis@example.com", "password": "pw-disabled-1", "enabled": False}
        await relay.create("users", user)
        refused = await relay.control.post(
            "/api/auth/login", json={"email": "dis@example.com", "password": "pw-disabled-1"}
        )
        assert refused.status_code == 401
        [entry] = await appended(relay, refused)
    assert (entry["action"], entry["ref"], entry["after"]) == (
        "sign_in_failed",
        "dis@example.com",
        {"reason": "user disabled"},
    )
    assert entry["ip"] == "127.0.0.1" and "pw-disabled" not in str(entry)


async def test_the_request_context_belongs_to_one_task() -> None:
    seen: dict[str, RequestContext] = {}

    async def request(name: str) -> None:
        with request_scope(request_id=name, ip="10.0.0.1", user_agent="x" * 600):
            await asyncio.sleep(0)  # the other request runs meanwhile
            seen[name] = current()

    await asyncio.gather(request("a"), request("b"))
    assert (seen["a"].request_id, seen["b"].request_id) == ("a", "b")
    assert len(seen["a"].user_agent or "") == 512
    assert current() == RequestContext()  # outside any request: the admin token, nothing else
