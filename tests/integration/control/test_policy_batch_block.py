"""The policy's ``batch`` block through the control API (SPEC §17, §11): created, patched, refused
naming the field with nothing stored, shown whole, exported only when chosen and applied idempotently,
against real ``relay serve`` processes on SQLite and Postgres."""

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

DEFAULTS = {"pacing": "fail", "live_reserve": 0.0, "max_concurrency": None, "translate": False}
PACED = {"pacing": "wait", "live_reserve": 0.2, "max_concurrency": 8, "translate": True}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_policy_without_a_block_shows_the_defaults(relay: RelayProcess) -> None:
    created = relay.create("policies", {"name": uniq("pol")})
    assert created["batch"] == DEFAULTS
    assert relay.api("GET", f"/api/policies/{created['name']}").json()["batch"] == DEFAULTS


def test_create_stores_the_block_and_patch_replaces_it(relay: RelayProcess) -> None:
    name = uniq("pol")
    created = relay.create("policies", {"name": name, "batch": PACED})
    assert created["batch"] == PACED
    listed = next(p for p in relay.api("GET", "/api/policies").json()["items"] if p["name"] == name)
    assert listed["batch"] == PACED

    # A PATCH gives the whole block: fields it leaves out take their defaults.
    patched = relay.api("PATCH", f"/api/policies/{name}", {"batch": {"pacing": "wait", "live_reserve": 0}})
    assert patched.status_code == 200, patched.text
    assert patched.json()["batch"] == {**DEFAULTS, "pacing": "wait", "live_reserve": 0.0}
    # A PATCH of another field keeps the block.
    assert relay.api("PATCH", f"/api/policies/{name}", {"payload_logging": True}).json()["batch"] == {
        **DEFAULTS,
        "pacing": "wait",
    }
    # null resets it to the defaults.
    reset = relay.api("PATCH", f"/api/policies/{name}", {"batch": None})
    assert reset.status_code == 200 and reset.json()["batch"] == DEFAULTS


def test_an_integer_zero_reserve_is_accepted_as_a_number(relay: RelayProcess) -> None:
    """A YAML or JSON writer says ``live_reserve: 0``; it means 0.0 (a boolean never does)."""
    created = relay.create("policies", {"name": uniq("pol"), "batch": {"live_reserve": 0, "pacing": "wait"}})
    assert created["batch"]["live_reserve"] == 0.0


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"pacing": "later"}, "batch.pacing"),
        ({"live_reserve": 0.95}, "batch.live_reserve"),
        ({"live_reserve": -0.1}, "batch.live_reserve"),
        ({"live_reserve": "0.2"}, "batch.live_reserve"),
        ({"live_reserve": True}, "batch.live_reserve"),
        ({"max_concurrency": 0}, "batch.max_concurrency"),
        ({"max_concurrency": 1.5}, "batch.max_concurrency"),
        ({"max_concurrency": False}, "batch.max_concurrency"),
        ({"translate": "yes"}, "batch.translate"),
        ({"paced": "wait"}, "batch.paced"),
        ("wait", "batch"),
    ],
)
def test_a_bad_block_is_refused_naming_the_field_and_nothing_is_stored(
    relay: RelayProcess, block: Any, field: str
) -> None:
    name = uniq("pol")
    response = relay.api("POST", "/api/policies", {"name": name, "batch": block})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["message"].startswith(f"{field}:")
    assert relay.api("GET", f"/api/policies/{name}").status_code == 404

    # The same block in a PATCH leaves the stored policy as it was.
    relay.create("policies", {"name": name, "batch": PACED})
    response = relay.api("PATCH", f"/api/policies/{name}", {"batch": block, "payload_logging": True})
    assert response.status_code == 400 and response.json()["error"]["message"].startswith(f"{field}:")
    stored = relay.api("GET", f"/api/policies/{name}").json()
    assert stored["batch"] == PACED and stored["payload_logging"] is False


def test_apply_refuses_a_bad_block_naming_the_document_and_field(relay: RelayProcess) -> None:
    name = uniq("pol")
    document = {"kind": "Policy", "name": name, "spec": {"batch": {"live_reserve": 2}}}
    response = relay.api("POST", "/api/apply", {"documents": [document]})
    assert response.status_code == 400
    assert "batch.live_reserve" in response.json()["error"]["message"]
    assert relay.api("GET", f"/api/policies/{name}").status_code == 404


def test_export_writes_the_block_only_when_chosen_and_apply_round_trips(
    relay: RelayProcess, tmp_path: Path
) -> None:
    s = uuid.uuid4().hex[:6]
    documents = [
        {"kind": "Policy", "name": f"paced-{s}", "spec": {"batch": {"pacing": "wait", "live_reserve": 0.2}}},
        {"kind": "Policy", "name": f"plain-{s}", "spec": {"models": ["*"]}},
        {"kind": "Policy", "name": f"spelled-{s}", "spec": {"batch": {"pacing": "fail", "live_reserve": 0}}},
    ]
    applied = run_cli(relay, "apply", "-f", str(write_yaml(tmp_path / "catalog.yaml", documents)))
    assert applied.returncode == 0, applied.stderr
    assert relay.api("GET", f"/api/policies/paced-{s}").json()["batch"] == {
        **DEFAULTS,
        "pacing": "wait",
        "live_reserve": 0.2,
    }
    # Applying the same file again changes nothing (an explicit default block equals no block).
    again = relay.api("POST", "/api/apply", {"documents": documents}).json()["plan"]
    assert [step["action"] for step in again] == ["unchanged"] * 3

    exported = run_cli(relay, "export", "-o", str(tmp_path / "export.yaml"))
    assert exported.returncode == 0, exported.stderr
    mine = {
        d["name"]: d["spec"]
        for d in yaml.safe_load_all((tmp_path / "export.yaml").read_text())
        if d and d["kind"] == "Policy" and d["name"].endswith(s)
    }
    assert mine[f"paced-{s}"]["batch"] == {**DEFAULTS, "pacing": "wait", "live_reserve": 0.2}
    assert "batch" not in mine[f"plain-{s}"] and "batch" not in mine[f"spelled-{s}"]
    exported_docs = [{"kind": "Policy", "name": n, "spec": spec} for n, spec in mine.items()]
    assert {
        s["action"] for s in relay.api("POST", "/api/apply", {"documents": exported_docs}).json()["plan"]
    } == {"unchanged"}

    # Changing one field of the block is an update that names it.
    changed = [{**documents[0], "spec": {"batch": {"pacing": "wait", "live_reserve": 0.3}}}]
    plan = relay.api("POST", "/api/apply", {"documents": changed}).json()["plan"]
    assert plan[0]["action"] == "update"
    assert plan[0]["changes"]["batch"]["to"]["live_reserve"] == 0.3
    # A document that drops the block puts the defaults back.
    dropped = relay.api("POST", "/api/apply", {"documents": [{**documents[0], "spec": {}}]}).json()["plan"]
    assert dropped[0]["action"] == "update"
    assert relay.api("GET", f"/api/policies/paced-{s}").json()["batch"] == DEFAULTS


def test_the_openapi_document_describes_the_block(relay: RelayProcess) -> None:
    document = relay.control.get("/api/openapi.json").json()
    schemas = document["components"]["schemas"]
    batch = schemas["PolicyObject"]["properties"]["batch"]
    assert batch["description"].startswith("How batch items meet the policy's limits")
    block = schemas["BatchPolicy"]
    assert block["additionalProperties"] is False
    assert block["properties"]["pacing"]["enum"] == ["fail", "wait"]
    assert (
        block["properties"]["live_reserve"]["minimum"],
        block["properties"]["live_reserve"]["maximum"],
    ) == (
        0.0,
        0.9,
    )
    assert {"minimum": 1, "type": "integer"} in block["properties"]["max_concurrency"]["anyOf"]
    assert block["properties"]["translate"]["type"] == "boolean"


def test_the_dashboard_catalog_shows_each_policys_batch_block(relay: RelayProcess) -> None:
    paced, plain = uniq("paced"), uniq("plain")
    relay.create(
        "policies", {"name": paced, "batch": {"pacing": "wait", "live_reserve": 0.2, "max_concurrency": 8}}
    )
    relay.create("policies", {"name": plain})
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        form = browser.get("/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        signed_in = browser.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": csrf.group(1)})
        assert signed_in.status_code in (200, 303), signed_in.text
        page = browser.get("/ui/catalog")
    assert page.status_code == 200
    assert '<th scope="col">Batches</th>' in page.text
    cells = dict(
        re.findall(r'<tr data-policy="([^"]+)">.*?<td data-testid="batches">([^<]*)</td>', page.text)
    )
    assert cells[paced] == "wait · live 20% · max 8"
    assert cells[plain] == "fail"
