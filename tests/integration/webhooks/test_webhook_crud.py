"""The ``Webhook`` kind through the control API, ``relay apply`` and ``relay export`` (SPEC §2, §10.10,
§11): validation naming the field, a write-only secret (generated once, never rendered or exported),
references and deletes. One relay per backend (SQLite and Postgres)."""

from __future__ import annotations

import base64
import os
import subprocess
from typing import Any

import pytest
import yaml

from tests.fixtures.live import Gateway, uniq
from tests.fixtures.relay_server import ADMIN_TOKEN, RELAY_BIN
from tests.integration.webhooks.helpers import new_webhook

ALL_EVENTS = ["batch.completed", "batch.cancelled", "batch.expired", "batch.failed"]


def refused(gw: Gateway, method: str, path: str, body: Any, field: str, status: int = 400) -> str:
    response = gw.relay.api(method, path, body)
    assert response.status_code == status, response.text
    message = str(response.json()["error"]["message"])
    assert field in message, message
    return message


def test_create_generates_a_secret_returned_once(hooked: Gateway) -> None:
    created = new_webhook(hooked, "https://hooks.example.com/relay")
    secret = created["secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert created["events"] == ALL_EVENTS  # default: all
    assert created["project"] is None and created["enabled"] is True
    assert created["id"].startswith("wh_")
    for view in (
        hooked.get("webhooks", created["name"]),
        *hooked.relay.api("GET", "/api/webhooks").json()["items"],
    ):
        assert "secret" not in view and "secret_encrypted" not in view
        assert secret not in str(view)
    patched = hooked.patch("webhooks", created["name"], {"enabled": False})
    assert "secret" not in patched and patched["enabled"] is False


def test_a_given_secret_is_never_rendered(hooked: Gateway) -> None:
    secret = "my-own-webhook-secret-0123456789"
    created = new_webhook(hooked, "http://127.0.0.1:9/x", secret=secret, events=["batch.cancelled"])
    assert "secret" not in created and secret not in str(created)
    assert created["events"] == ["batch.cancelled"]


@pytest.mark.parametrize(
    "url",
    ["ftp://hooks.example.com/x", "not a url", "", "https://user:pw@hooks.example.com/x", "mailto:a@b.c"],
)
def test_bad_url_is_refused_naming_url(hooked: Gateway, url: str) -> None:
    name = uniq("wh")
    refused(hooked, "POST", "/api/webhooks", {"name": name, "url": url}, "url")
    assert hooked.relay.api("GET", f"/api/webhooks/{name}").status_code == 404  # nothing written


@pytest.mark.parametrize(
    "events", [["batch.finished"], [], ["batch.completed", "batch.completed"], "batch.completed", [1]]
)
def test_bad_events_are_refused_naming_events(hooked: Gateway, events: Any) -> None:
    body = {"name": uniq("wh"), "url": "https://hooks.example.com/x", "events": events}
    refused(hooked, "POST", "/api/webhooks", body, "events")


def test_bad_secret_unknown_project_and_unknown_field(hooked: Gateway) -> None:
    url = "https://hooks.example.com/x"
    refused(hooked, "POST", "/api/webhooks", {"name": uniq("wh"), "url": url, "secret": "short"}, "secret")
    bad_b64 = {"name": uniq("wh"), "url": url, "secret": "whsec_!!!not-base64!!!"}
    refused(hooked, "POST", "/api/webhooks", bad_b64, "secret")
    nowhere = {"name": uniq("wh"), "url": url, "project": "no-such-project"}
    refused(hooked, "POST", "/api/webhooks", nowhere, "project", status=422)
    refused(hooked, "POST", "/api/webhooks", {"name": uniq("wh"), "url": url, "target": "x"}, "target")


def test_patch_validates_like_create(hooked: Gateway) -> None:
    created = new_webhook(hooked, "https://hooks.example.com/p")
    refused(hooked, "PATCH", f"/api/webhooks/{created['name']}", {"url": "gopher://x"}, "url")
    refused(hooked, "PATCH", f"/api/webhooks/{created['name']}", {"events": ["nope"]}, "events")
    assert hooked.get("webhooks", created["name"])["url"] == "https://hooks.example.com/p"


def test_project_reference_and_delete(hooked: Gateway) -> None:
    project = hooked.create("projects", {"name": uniq("prj"), "team": "live-team"})
    created = new_webhook(hooked, "https://hooks.example.com/p", project=project["name"])
    assert created["project"] == project["name"] and created["project_id"] == project["id"]
    # The webhook references the project: deleting the project is refused while it exists.
    message = refused(hooked, "DELETE", f"/api/projects/{project['name']}", None, "webhooks", status=409)
    assert "webhooks" in message
    assert hooked.relay.api("DELETE", f"/api/webhooks/{created['name']}").status_code == 204
    assert hooked.relay.api("DELETE", f"/api/projects/{project['name']}").status_code == 204


def _cli(gw: Gateway, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RELAY_CONTROL_URL": gw.relay.control_url, "RELAY_ADMIN_TOKEN": ADMIN_TOKEN}
    return subprocess.run([RELAY_BIN, *args], env=env, capture_output=True, text=True, timeout=60)


def test_apply_prints_a_generated_secret_once_and_export_never_holds_it(
    hooked: Gateway, tmp_path: Any
) -> None:
    name, given_name = uniq("wh"), uniq("wh")
    given = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    docs = [
        {"kind": "Webhook", "name": name, "spec": {"url": "https://hooks.example.com/a"}},
        {
            "kind": "Webhook",
            "name": given_name,
            "spec": {"url": "https://hooks.example.com/b", "secret": given},
        },
    ]
    path = tmp_path / "hooks.yaml"
    path.write_text(yaml.safe_dump_all(docs))

    dry = _cli(hooked, "apply", "-f", str(path), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "whsec_" not in dry.stdout + dry.stderr  # a dry run stores nothing, so shows no secret

    first = _cli(hooked, "apply", "-f", str(path))
    assert first.returncode == 0, first.stderr
    lines = [line for line in first.stderr.splitlines() if "whsec_" in line]
    assert len(lines) == 1 and f"Webhook {name}: secret whsec_" in lines[0]  # only the generated one
    assert given not in first.stdout + first.stderr
    assert "whsec_" not in first.stdout  # the plan table on stdout stays free of secrets

    again = _cli(hooked, "apply", "-f", str(path))  # the same file: unchanged, nothing generated
    assert again.returncode == 0, again.stderr
    assert "whsec_" not in again.stdout + again.stderr
    plan = hooked.relay.api("POST", "/api/apply", {"documents": docs, "dry_run": True}).json()["plan"]
    assert {(s["name"], s["action"]) for s in plan} == {(name, "unchanged"), (given_name, "unchanged")}

    # A changed secret is an update, shown masked.
    rotated = [docs[0], {**docs[1], "spec": {**docs[1]["spec"], "secret": given + "AAAA"}}]
    plan = hooked.relay.api("POST", "/api/apply", {"documents": rotated, "dry_run": True}).json()["plan"]
    step = next(s for s in plan if s["name"] == given_name)
    assert step["action"] == "update" and step["changes"] == {
        "secret": {"from": "********", "to": "********"}
    }

    exported = _cli(hooked, "export")
    assert exported.returncode == 0, exported.stderr
    assert "whsec_" not in exported.stdout and given not in exported.stdout
    mine = [
        d for d in yaml.safe_load_all(exported.stdout) if d and d["kind"] == "Webhook" and d["name"] == name
    ]
    assert mine == [
        {
            "kind": "Webhook",
            "name": name,
            "spec": {"url": "https://hooks.example.com/a", "events": ALL_EVENTS, "enabled": True},
        }
    ]
    # Re-applying the export keeps the stored secrets: unchanged.
    plan = hooked.relay.api("POST", "/api/apply", {"documents": mine, "dry_run": True}).json()["plan"]
    assert plan == [{"kind": "Webhook", "name": name, "action": "unchanged"}]
