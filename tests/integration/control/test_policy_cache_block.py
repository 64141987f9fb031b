"""The policy's ``cache`` block through the control API (SPEC §19, §11): created, patched, refused 422
naming the field with nothing stored, exported and applied round trip, shown on the dashboard's
catalog page, against real ``relay serve`` processes on SQLite and Postgres."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.fixtures.relay_server import ADMIN_TOKEN, RelayProcess
from tests.integration.control.test_apply_export import run_cli, write_yaml

CACHED = {"ttl": "1h", "scope": "credential", "streams": False}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_policy_without_a_block_has_no_cache_and_a_block_gets_its_defaults(relay: RelayProcess) -> None:
    assert relay.create("policies", {"name": uniq("pol")})["cache"] is None
    name = uniq("pol")
    created = relay.create("policies", {"name": name, "cache": {"ttl": "10m"}})
    assert created["cache"] == {"ttl": "10m", "scope": "project", "streams": True}
    assert relay.api("GET", f"/api/policies/{name}").json()["cache"] == created["cache"]


def test_patch_replaces_the_block_and_null_turns_the_cache_off(relay: RelayProcess) -> None:
    name = uniq("pol")
    relay.create("policies", {"name": name, "cache": {"ttl": "10m"}})
    patched = relay.api("PATCH", f"/api/policies/{name}", {"cache": CACHED})
    assert patched.status_code == 200, patched.text
    assert patched.json()["cache"] == CACHED
    assert relay.api("PATCH", f"/api/policies/{name}", {"payload_logging": True}).json()["cache"] == CACHED
    off = relay.api("PATCH", f"/api/policies/{name}", {"cache": None})
    assert off.status_code == 200 and off.json()["cache"] is None


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"ttl": "31d"}, "cache.ttl"),
        ({"ttl": "0m"}, "cache.ttl"),
        ({"ttl": "1 hour"}, "cache.ttl"),
        ({"ttl": 3600}, "cache.ttl"),
        ({"scope": "project"}, "cache.ttl"),
        ({"ttl": "1h", "scope": "team"}, "cache.scope"),
        ({"ttl": "1h", "streams": "yes"}, "cache.streams"),
        ({"ttl": "1h", "size": 10}, "cache.size"),
        ("1h", "cache"),
    ],
)
def test_a_bad_block_is_refused_422_naming_the_field_and_nothing_is_stored(
    relay: RelayProcess, block: Any, field: str
) -> None:
    name = uniq("pol")
    response = relay.api("POST", "/api/policies", {"name": name, "cache": block})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(f"{field}:")
    assert relay.api("GET", f"/api/policies/{name}").status_code == 404

    relay.create("policies", {"name": name, "cache": CACHED})
    response = relay.api("PATCH", f"/api/policies/{name}", {"cache": block, "payload_logging": True})
    assert response.status_code == 422 and response.json()["error"]["message"].startswith(f"{field}:")
    stored = relay.api("GET", f"/api/policies/{name}").json()
    assert stored["cache"] == CACHED and stored["payload_logging"] is False

    document = {"kind": "Policy", "name": uniq("pol"), "spec": {"cache": block}}
    applied = relay.api("POST", "/api/apply", {"documents": [document]})
    assert applied.status_code == 422 and field in applied.json()["error"]["message"]
    assert relay.api("GET", f"/api/policies/{document['name']}").status_code == 404


def test_export_writes_the_block_and_apply_round_trips(relay: RelayProcess, tmp_path: Path) -> None:
    s = uuid.uuid4().hex[:6]
    documents = [
        {"kind": "Policy", "name": f"cached-{s}", "spec": {"cache": {"ttl": "7d", "scope": "policy"}}},
        {"kind": "Policy", "name": f"plain-{s}", "spec": {"models": ["*"]}},
    ]
    applied = run_cli(relay, "apply", "-f", str(write_yaml(tmp_path / "catalog.yaml", documents)))
    assert applied.returncode == 0, applied.stderr
    again = relay.api("POST", "/api/apply", {"documents": documents}).json()["plan"]
    assert [step["action"] for step in again] == ["unchanged"] * 2

    exported = run_cli(relay, "export", "-o", str(tmp_path / "export.yaml"))
    assert exported.returncode == 0, exported.stderr
    mine = {
        d["name"]: d["spec"]
        for d in yaml.safe_load_all((tmp_path / "export.yaml").read_text())
        if d and d["kind"] == "Policy" and d["name"].endswith(s)
    }
    assert mine[f"cached-{s}"]["cache"] == {"ttl": "7d", "scope": "policy", "streams": True}
    assert "cache" not in mine[f"plain-{s}"]
    exported_docs = [{"kind": "Policy", "name": n, "spec": spec} for n, spec in mine.items()]
    plan = relay.api("POST", "/api/apply", {"documents": exported_docs}).json()["plan"]
    assert {step["action"] for step in plan} == {"unchanged"}

    changed = [{**documents[0], "spec": {"cache": {"ttl": "1d", "scope": "policy"}}}]
    plan = relay.api("POST", "/api/apply", {"documents": changed}).json()["plan"]
    assert plan[0]["action"] == "update" and plan[0]["changes"]["cache"]["to"]["ttl"] == "1d"
    dropped = relay.api("POST", "/api/apply", {"documents": [{**documents[0], "spec": {}}]}).json()["plan"]
    assert dropped[0]["action"] == "update"
    assert relay.api("GET", f"/api/policies/cached-{s}").json()["cache"] is None


def test_the_dashboard_catalog_shows_each_policys_cache(relay: RelayProcess) -> None:
    cached, plain = uniq("cached"), uniq("plain")
    relay.create("policies", {"name": cached, "cache": CACHED})
    relay.create("policies", {"name": plain})
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        form = browser.get("/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        browser.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": csrf.group(1)})
        page = browser.get("/ui/catalog")
    assert page.status_code == 200
    assert '<th scope="col">Cache</th>' in page.text
    cells = dict(re.findall(r'<tr data-policy="([^"]+)">.*?<td data-testid="cache">([^<]*)</td>', page.text))
    assert cells[cached] == "1h · credential · no streams"
    assert cells[plain] == "off"
