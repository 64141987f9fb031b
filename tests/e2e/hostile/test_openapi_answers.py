"""The OpenAPI document tells the truth (SPEC §11; issue 13 item 5): real answers of every GET route and
of the main writes, from a real ``relay serve`` on each backend, validate against the schema the
document declares for their status (JSON Schema 2020-12, ``$ref`` into the document's components).
The answer schemas are strict (``additionalProperties: false``), so an undeclared field fails too; and
every GET operation of the document must have been checked, so a new route cannot go undeclared."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from relay.control.kinds import KINDS
from tests.e2e.hostile.test_reproducers import make_user, recorded
from tests.fixtures.live import CHAT_MODEL, Gateway

#: Writes that must be checked besides every GET (the catalog kinds' writes are checked on teams).
MAIN_WRITES = {
    ("post", "/api/apply"),
    ("post", "/api/reload"),
    ("post", "/api/teams"),
    ("patch", "/api/teams/{ref}"),
    ("delete", "/api/teams/{ref}"),
    ("post", "/api/users"),
    ("post", "/api/keys"),
    ("patch", "/api/keys/{ref}"),
    ("post", "/api/keys/{ref}/rotate"),
    ("post", "/api/keys/{ref}/revoke"),
    ("delete", "/api/keys/{ref}"),
    ("post", "/api/users/{ref}/tokens"),
    ("post", "/api/users/{ref}/revoke-tokens"),
    ("delete", "/api/tokens/{jti}"),
    ("post", "/api/auth/login"),
    ("post", "/api/auth/token"),
    ("put", "/api/settings/payload_logging"),
    ("post", "/api/batches/{batch_id}/cancel"),
    ("delete", "/api/policies/{ref}/cache"),
}


class Conformance:
    """Calls the control API and checks each answer against the document; remembers what it checked."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.doc: dict[str, Any] = httpx.get(f"{gw.relay.control_url}/api/openapi.json", timeout=30).json()
        self.checked: set[tuple[str, str]] = set()

    def call(
        self, method: str, template: str, path: str | None = None, body: Any = None, **kwargs: Any
    ) -> httpx.Response:
        client = kwargs.pop("client", None) or self.gw.relay.control
        response = client.request(method.upper(), path or template, json=body, **kwargs)
        self.check(method, template, response)
        return response

    def check(self, method: str, template: str, response: httpx.Response) -> None:
        where = f"{method.upper()} {template} → {response.status_code}"
        responses = self.doc["paths"][template][method]["responses"]
        assert str(response.status_code) in responses, f"{where}: status not declared ({response.text})"
        declared = responses[str(response.status_code)]
        self.checked.add((method, template))
        if response.status_code == 204:
            assert "content" not in declared and response.content == b"", where
            return
        schema = declared["content"]["application/json"]["schema"]
        validator = Draft202012Validator({**schema, "components": self.doc["components"]})
        errors = [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(response.json())
        ]
        assert not errors, f"{where}: " + "; ".join(errors[:5])


@pytest.fixture(scope="module")
def api(hostile: Gateway) -> Conformance:
    return Conformance(hostile)


def test_catalog_routes_answer_what_the_document_declares(api: Conformance) -> None:
    make_user(api.gw)  # the module catalog has every other kind but webhooks and guardrails
    hook = {"name": f"w-{uuid.uuid4().hex[:8]}", "url": "http://127.0.0.1:9/hook"}
    generated = api.call("post", "/api/webhooks", body=hook)  # no secret: generated, returned once
    assert generated.status_code == 201 and generated.json()["secret"], generated.text
    assert "secret" not in api.call("get", "/api/webhooks/{ref}", f"/api/webhooks/{hook['name']}").json()
    given = {"name": f"w-{uuid.uuid4().hex[:8]}", "url": "http://127.0.0.1:9/hook", "secret": "s" * 32}
    chosen = api.call("post", "/api/webhooks", body=given)
    assert chosen.status_code == 201 and "secret" not in chosen.json(), chosen.text
    deliveries = api.call("get", "/api/webhooks/{ref}/deliveries", f"/api/webhooks/{hook['name']}/deliveries")
    assert deliveries.json() == {"items": []}
    guard = {"name": f"g-{uuid.uuid4().hex[:8]}", "stage": "input", "pii": ["email"]}
    assert api.call("post", "/api/guardrails", body=guard).status_code == 201
    bad = api.call("post", "/api/guardrails", body={**guard, "name": "g-bad", "regex": ["("]})
    assert bad.status_code == 422 and bad.json()["error"]["message"].startswith("regex:")
    for kind in KINDS:
        listing = api.call("get", f"/api/{kind.plural}").json()["items"]
        assert listing, f"the module catalog has no {kind.name}"
        api.call("get", f"/api/{kind.plural}/{{ref}}", f"/api/{kind.plural}/{listing[0]['id']}")
        missing = api.call(
            "get", f"/api/{kind.plural}/{{ref}}", f"/api/{kind.plural}/nothing-{uuid.uuid4().hex}"
        )
        assert missing.status_code == 404
    name = f"t-{uuid.uuid4().hex[:8]}"
    api.call("post", "/api/teams", body={"name": name, "display_name": "T"})
    api.call("patch", "/api/teams/{ref}", f"/api/teams/{name}", body={"display_name": "T2"})
    assert api.call("post", "/api/teams", body={"name": name}).status_code == 409
    assert api.call("post", "/api/teams", body={"name": name, "colour": 1}).status_code == 400
    assert api.call("delete", "/api/teams/{ref}", f"/api/teams/{name}").status_code == 204
    documents = api.call("get", "/api/export").json()["documents"]
    assert api.call("post", "/api/apply", body={"documents": documents, "dry_run": True}).status_code == 200
    api.call("post", "/api/reload")
    api.call("get", "/api/snapshot")
    assert (
        api.call("get", "/api/snapshot", client=httpx.Client(base_url=api.gw.relay.control_url)).status_code
        == 401
    )


def test_credential_routes_answer_what_the_document_declares(api: Conformance) -> None:
    gw = api.gw
    body = {"principal_kind": "serviceaccount", "principal": gw.account, "payload_logging": True}
    key = api.call("post", "/api/keys", body=body).json()["key"]
    one = f"/api/keys/{key['id']}"
    api.call("get", "/api/keys")
    api.call("get", "/api/keys/{ref}", one)
    api.call("patch", "/api/keys/{ref}", one, body={"name": f"k-{uuid.uuid4().hex[:8]}"})
    api.call("post", "/api/keys/{ref}/rotate", f"{one}/rotate", body={"grace_seconds": 60})
    api.call("post", "/api/keys/{ref}/revoke", f"{one}/revoke")
    assert api.call("delete", "/api/keys/{ref}", one).status_code == 204
    user, password = make_user(gw)
    api.call(
        "post",
        "/api/users",
        body={"name": f"u-{uuid.uuid4().hex[:8]}", "email": f"{uuid.uuid4().hex[:8]}@x.test"},
    )
    minted = api.call(
        "post", "/api/users/{ref}/tokens", f"/api/users/{user['id']}/tokens", body={"project": gw.project}
    )
    api.call("delete", "/api/tokens/{jti}", f"/api/tokens/{minted.json()['jti']}")
    with httpx.Client(base_url=gw.relay.control_url, timeout=30) as anonymous:
        login = api.call(
            "post", "/api/auth/login", body={"email": user["email"], "password": password}, client=anonymous
        )
        session = login.json()["session"]
        api.call(
            "post",
            "/api/auth/token",
            body={"project": gw.project},
            client=anonymous,
            headers={"authorization": f"Bearer {session}"},
        )
    api.call("post", "/api/users/{ref}/revoke-tokens", f"/api/users/{user['id']}/revoke-tokens")


def test_usage_settings_and_spend_answer_what_the_document_declares(api: Conformance) -> None:
    gw = api.gw
    api.call("put", "/api/settings/payload_logging", body={"enabled": True})
    api.call("get", "/api/settings/payload_logging")
    body = {"principal_kind": "serviceaccount", "principal": gw.account, "payload_logging": True}
    plaintext = gw.relay.api("POST", "/api/keys", body).json()["plaintext"]
    gw.wait_until_known(plaintext)
    answered = gw.chat(key=plaintext)
    assert answered.status_code == 200, answered.text
    request_id = answered.headers["x-relay-request-id"]
    recorded(gw, request_id)
    api.call("put", "/api/settings/payload_logging", body={"enabled": False})
    api.call("get", "/api/payloads/{request_id}", f"/api/payloads/{request_id}")
    assert api.call("get", "/api/usage/events", "/api/usage/events?limit=5").json()["events"]
    for group in ("source", "model", "project", "team", "policy", "host", "credential", "day"):
        assert api.call("get", "/api/usage/summary", f"/api/usage/summary?group_by={group}").json()["rows"]
    assert api.call("get", "/api/usage/summary", "/api/usage/summary?group_by=colour").status_code == 400
    budget = gw.scenario(rules=[{"meter": "cost_usd", "limit": 5, "window": "1d"}])
    assert gw.chat(budget.model, key=budget.key).status_code == 200
    spend = api.call("get", "/api/policies/{ref}/spend", f"/api/policies/{budget.policy}/spend").json()
    assert spend["rules"][0]["entries"], spend
    api.call("get", "/api/policies/{ref}/spend", f"/api/policies/{gw.policy}/spend")
    gw.patch("policies", budget.policy, {"cache": {"ttl": "1h"}})
    assert gw.chat(budget.model, key=budget.key).headers["x-relay-cache"] == "miss"
    path = f"/api/policies/{budget.policy}/cache"
    assert api.call("delete", "/api/policies/{ref}/cache", path).json()["purged"] == 1


def test_batch_admin_routes_answer_what_the_document_declares(api: Conformance) -> None:
    gw = api.gw
    item = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "hi"}]}
    done = gw.post("/v1/batches", {"shape": "openai", "requests": [item]}).json()["id"]
    deadline = time.monotonic() + 30
    while api.call("get", "/api/batches/{batch_id}", f"/api/batches/{done}").json()["state"] != "completed":
        assert time.monotonic() < deadline, "the batch never completed"
        time.sleep(0.1)
    bad = {"model": "no-such-model", "messages": []}
    open_batch = gw.post("/v1/batches", {"shape": "openai", "requests": [bad, item] * 20}).json()["id"]
    api.call("post", "/api/batches/{batch_id}/cancel", f"/api/batches/{open_batch}/cancel")
    api.call("get", "/api/batches/{batch_id}", f"/api/batches/{open_batch}")
    assert api.call("get", "/api/batches", "/api/batches?limit=1").json()["next_cursor"]
    assert (
        api.call("get", "/api/batches/{batch_id}", "/api/batches/b_00000000000000000000000000").status_code
        == 404
    )


def test_audit_routes_answer_what_the_document_declares(api: Conformance) -> None:
    page = api.call("get", "/api/audit", "/api/audit?limit=2").json()
    assert len(page["items"]) == 2 and page["next_cursor"]  # the module's catalog writes are audited
    assert api.call("get", "/api/audit", "/api/audit?action=sign_in_failed&limit=1000").status_code == 200
    assert api.call("get", "/api/audit/verify").json()["ok"] is True


def test_every_get_and_the_main_writes_were_checked(api: Conformance) -> None:
    operations = {
        (method, path)
        for path, item in api.doc["paths"].items()
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    }
    gets = {op for op in operations if op[0] == "get"}
    assert operations >= MAIN_WRITES, MAIN_WRITES - operations
    assert sorted(gets - api.checked) == [], "GET routes whose answers no test checked"
    assert sorted(MAIN_WRITES - api.checked) == [], "writes whose answers no test checked"
    generic = [
        (method, path, code)
        for path, item in api.doc["paths"].items()
        for method, op in item.items()
        for code, answer in op.get("responses", {}).items()
        if code.startswith("2")
        and code != "204"
        and answer["content"]["application/json"]["schema"].get("additionalProperties") is True
    ]
    assert generic == [], "routes still declaring a generic object"
