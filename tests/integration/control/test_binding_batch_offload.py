"""A binding's ``batch_offload`` block through the control API (SPEC §22, §11): created with its
defaults filled, patched, refused 422 naming the field with nothing stored, exported and applied round
trip, shown on the dashboard's catalog page, against real ``relay serve`` processes on SQLite and
Postgres."""

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

NATIVE = {"mode": "native", "min_items": 20, "discount": 0.4}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def host_and_model(relay: RelayProcess) -> tuple[str, str]:
    host, model = uniq("hst"), uniq("mdl")
    relay.create("hosts", {"name": host, "base_url": "https://api.example.com"})
    relay.create("models", {"name": model, "provider": "openai"})
    return host, model


def binding(relay: RelayProcess, **extra: Any) -> dict[str, Any]:
    host, model = host_and_model(relay)
    return {"name": uniq("bnd"), "model": model, "host": host, "adapter": "openai", **extra}


def test_a_binding_without_a_block_never_offloads_and_a_block_gets_its_defaults(relay: RelayProcess) -> None:
    assert relay.create("bindings", binding(relay))["batch_offload"] is None
    body = binding(relay, batch_offload={"mode": "native"})
    created = relay.create("bindings", body)
    assert created["batch_offload"] == {"mode": "native", "min_items": 100, "discount": 0.5}
    assert (
        relay.api("GET", f"/api/bindings/{body['name']}").json()["batch_offload"] == created["batch_offload"]
    )


def test_patch_replaces_the_block_and_null_turns_offload_off(relay: RelayProcess) -> None:
    body = binding(relay, batch_offload={"mode": "native"})
    relay.create("bindings", body)
    path = f"/api/bindings/{body['name']}"
    patched = relay.api("PATCH", path, {"batch_offload": NATIVE})
    assert patched.status_code == 200, patched.text
    assert patched.json()["batch_offload"] == NATIVE
    assert relay.api("PATCH", path, {"upstream_name": "gpt-x"}).json()["batch_offload"] == NATIVE
    off = relay.api("PATCH", path, {"batch_offload": None})
    assert off.status_code == 200 and off.json()["batch_offload"] is None


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ({"mode": "native", "discount": 1.5}, "batch_offload.discount"),
        ({"mode": "native", "discount": -0.1}, "batch_offload.discount"),
        ({"mode": "native", "discount": "half"}, "batch_offload.discount"),
        ({"mode": "native", "min_items": 0}, "batch_offload.min_items"),
        ({"mode": "native", "min_items": 2.5}, "batch_offload.min_items"),
        ({"mode": "always"}, "batch_offload.mode"),
        ({"mode": "native", "provider": "openai"}, "batch_offload.provider"),
        ("native", "batch_offload"),
    ],
)
def test_a_bad_block_is_refused_422_naming_the_field_and_nothing_is_stored(
    relay: RelayProcess, block: Any, field: str
) -> None:
    body = binding(relay, batch_offload=block)
    response = relay.api("POST", "/api/bindings", body)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith(f"{field}:")
    assert relay.api("GET", f"/api/bindings/{body['name']}").status_code == 404

    relay.create("bindings", {**body, "batch_offload": NATIVE})
    path = f"/api/bindings/{body['name']}"
    response = relay.api("PATCH", path, {"batch_offload": block, "upstream_name": "changed"})
    assert response.status_code == 422 and response.json()["error"]["message"].startswith(f"{field}:")
    stored = relay.api("GET", path).json()
    assert stored["batch_offload"] == NATIVE and stored["upstream_name"] is None

    document = {"kind": "Binding", "name": uniq("bnd"), "spec": {**body, "batch_offload": block}}
    del document["spec"]["name"]
    applied = relay.api("POST", "/api/apply", {"documents": [document]})
    assert applied.status_code == 422 and field in applied.json()["error"]["message"]
    assert relay.api("GET", f"/api/bindings/{document['name']}").status_code == 404


def test_export_writes_the_block_and_apply_round_trips(relay: RelayProcess, tmp_path: Path) -> None:
    s = uuid.uuid4().hex[:6]
    host, model = host_and_model(relay)
    spec = {"model": model, "host": host, "adapter": "anthropic"}
    documents = [
        {"kind": "Binding", "name": f"native-{s}", "spec": {**spec, "batch_offload": NATIVE}},
        {"kind": "Binding", "name": f"plain-{s}", "spec": spec},
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
        if d and d["kind"] == "Binding" and d["name"].endswith(s)
    }
    assert mine[f"native-{s}"]["batch_offload"] == NATIVE
    assert "batch_offload" not in mine[f"plain-{s}"]
    exported_docs = [{"kind": "Binding", "name": n, "spec": spec} for n, spec in mine.items()]
    plan = relay.api("POST", "/api/apply", {"documents": exported_docs}).json()["plan"]
    assert {step["action"] for step in plan} == {"unchanged"}

    changed = [{**documents[0], "spec": {**spec, "batch_offload": {**NATIVE, "discount": 0.25}}}]
    plan = relay.api("POST", "/api/apply", {"documents": changed}).json()["plan"]
    assert plan[0]["action"] == "update" and plan[0]["changes"]["batch_offload"]["to"]["discount"] == 0.25
    dropped = relay.api("POST", "/api/apply", {"documents": [{**documents[0], "spec": spec}]}).json()["plan"]
    assert dropped[0]["action"] == "update"
    assert relay.api("GET", f"/api/bindings/native-{s}").json()["batch_offload"] is None


def test_the_dashboard_catalog_shows_each_bindings_offload(relay: RelayProcess) -> None:
    native = binding(relay, batch_offload=NATIVE)
    never = binding(relay, batch_offload={"mode": "never", "discount": 0.3})
    plain = binding(relay)
    for body in (native, never, plain):
        relay.create("bindings", body)
    with httpx.Client(base_url=relay.control_url, timeout=30) as browser:
        form = browser.get("/ui/signin")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        browser.post("/ui/signin", data={"admin_token": ADMIN_TOKEN, "csrf": csrf.group(1)})
        page = browser.get("/ui/catalog")
    assert page.status_code == 200
    assert '<th scope="col">Batch offload</th>' in page.text
    cells = dict(
        re.findall(r'<tr data-binding="([^"]+)">.*?<td data-testid="offload">([^<]*)</td>', page.text)
    )
    assert cells[native["name"]] == "native · ≥ 20 items · 40%"
    assert cells[never["name"]] == "never"
    assert cells[plain["name"]] == "never"
